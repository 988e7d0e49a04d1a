//! The client's request body as every handler reads it: a body that stops arriving is
//! failed after a bound, and every fault of it is named as the client's.
//!
//! Whoever reads the body (the proxy streaming it upstream, a JSON extractor) gets a
//! [`RequestBodyError`] somewhere in the error chain it sees, and can answer 400 or
//! 408 instead of blaming the upstream or itself. The stall bound counts only time
//! spent waiting for the client: a reader that stops reading (an upstream applying
//! back-pressure) stops the clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

/// Why a client's request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    /// Nothing arrived for longer than the bound while the body was being read.
    #[error("request body stalled: nothing arrived for {} ms", .0.as_millis())]
    Stalled(Duration),
    /// Bad framing (e.g. a malformed chunk), or the connection ended mid-body.
    #[error("request body is malformed or cut short")]
    Broken(#[source] hyper::Error),
}

impl RequestBodyError {
    /// The body error in `err`'s chain, if the failure was the request body's.
    pub fn find<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Self> {
        let mut current = Some(err);
        while let Some(e) = current {
            if let Some(found) = e.downcast_ref::<Self>() {
                return Some(found);
            }
            current = e.source();
        }
        None
    }
}

/// A request body whose pieces must come within `gap` of each other.
pub struct RequestBody {
    inner: Incoming,
    gap: Duration,
    /// Running while the reader waits for the client.
    timer: Option<Pin<Box<Sleep>>>,
    waiting: bool,
    /// Set when the body is dropped before its end; `None` for a request without one.
    left_unread: Option<Arc<AtomicBool>>,
    ended: bool,
}

/// Whether the handler dropped its request's body before the end, known once it
/// has answered.
///
/// Over HTTP/1 the rest of such a body is never read, so the connection cannot carry
/// another request; the answer must say `Connection: close`, or a client would send
/// its next request on a connection the gateway is closing.
#[derive(Debug)]
pub struct LeftUnread(Option<Arc<AtomicBool>>);

impl LeftUnread {
    pub fn get(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }
}

impl RequestBody {
    pub fn new(inner: Incoming, gap: Duration) -> (Self, LeftUnread) {
        let left_unread = (!inner.is_end_stream()).then(|| Arc::new(AtomicBool::new(false)));
        let flag = LeftUnread(left_unread.clone());
        let body = Self {
            inner,
            gap,
            timer: None,
            waiting: false,
            left_unread,
            ended: false,
        };
        (body, flag)
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if let Some(flag) = &self.left_unread
            && !self.ended
            && !self.inner.is_end_stream()
        {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = false;
                this.ended |= frame.is_none();
                Poll::Ready(frame.map(|f| f.map_err(RequestBodyError::Broken)))
            }
            Poll::Pending => {
                let deadline = Instant::now() + this.gap;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if !this.waiting {
                    timer.as_mut().reset(deadline);
                    this.waiting = true;
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(RequestBodyError::Stalled(this.gap)))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
