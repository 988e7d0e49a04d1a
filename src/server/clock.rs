//! The clock of one client connection: how long it may take to send a request head,
//! and how long it may sit idle between requests.
//!
//! A connection is in one of three phases. *Head*: from its accept (TLS handshake
//! included), or from the first byte of its next request, it has
//! `server.header_read_timeout_ms` to deliver a whole request head — a byte now and
//! then does not restart the clock. *Busy*: while any request is in flight (its head
//! parsed, its response not yet fully handed to hyper) nothing is bounded here, so a
//! slow upstream or a long streaming response is never cut. *Idle*: between requests
//! it may wait `server.idle_timeout_ms`. The bounds are enforced where hyper reads:
//! [`ClockedIo`] fails the read once the phase's deadline passes, and hyper closes
//! the connection.
//!
//! hyper's own `header_read_timeout` is not used: it also runs while a keep-alive
//! connection waits for its next request, so a header bound shorter than the idle
//! one would close every idle connection early; it knows nothing of the TLS
//! handshake or of HTTP/2 either.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// What every HTTP/2 connection sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head { since: Instant },
    Busy,
    Idle { since: Instant },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// How many bytes of the HTTP/2 preface have matched so far.
    Sniffing(usize),
    Http1,
    /// Control frames (pings, window updates) arrive between requests, so bytes on
    /// an idle HTTP/2 connection do not start a request head.
    Http2,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    in_flight: usize,
    protocol: Protocol,
    /// The task reading the connection, woken when the phase turns idle.
    reader: Option<Waker>,
}

/// Which bound a deadline enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    HeaderRead,
    Idle,
}

impl Bound {
    pub fn label(self) -> &'static str {
        match self {
            Bound::HeaderRead => "header_read",
            Bound::Idle => "idle",
        }
    }
}

/// The phase of one connection, shared by its reads and its requests.
#[derive(Debug)]
pub struct Clock {
    header_read: Duration,
    idle: Duration,
    state: Mutex<State>,
}

impl Clock {
    /// A connection accepted at `accepted`, waiting for its first request head.
    pub fn new(header_read: Duration, idle: Duration, accepted: Instant) -> Arc<Self> {
        Arc::new(Self {
            header_read,
            idle,
            state: Mutex::new(State {
                phase: Phase::Head { since: accepted },
                in_flight: 0,
                protocol: Protocol::Sniffing(0),
                reader: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state whole; a panic elsewhere cannot tear it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request head was parsed; the returned guard ends the request when dropped
    /// (with its response body, or with the request if no response was made).
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        let mut state = self.state();
        state.in_flight += 1;
        state.phase = Phase::Busy;
        InFlight(self.clone())
    }

    fn request_ended(&self) {
        let mut state = self.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.phase = Phase::Idle {
                since: Instant::now(),
            };
            if let Some(reader) = state.reader.take() {
                reader.wake();
            }
        }
    }

    /// Bytes arrived from the client.
    fn on_read(&self, bytes: &[u8]) {
        let mut state = self.state();
        if let Protocol::Sniffing(matched) = state.protocol {
            let expected = &H2_PREFACE[matched..];
            let n = bytes.len().min(expected.len());
            state.protocol = if bytes[..n] != expected[..n] {
                Protocol::Http1
            } else if matched + n == H2_PREFACE.len() {
                Protocol::Http2
            } else {
                Protocol::Sniffing(matched + n)
            };
        }
        if matches!(state.phase, Phase::Idle { .. }) && state.protocol != Protocol::Http2 {
            state.phase = Phase::Head {
                since: Instant::now(),
            };
        }
    }

    /// The deadline in force, if any; remembers `waker` as the reader to wake.
    fn deadline(&self, waker: &Waker) -> Option<(Instant, Bound)> {
        let mut state = self.state();
        match &state.reader {
            Some(reader) if reader.will_wake(waker) => {}
            _ => state.reader = Some(waker.clone()),
        }
        match state.phase {
            Phase::Head { since } => Some((since + self.header_read, Bound::HeaderRead)),
            Phase::Idle { since } => Some((since + self.idle, Bound::Idle)),
            Phase::Busy => None,
        }
    }
}

/// One request in flight on a connection; dropping it ends the request.
#[derive(Debug)]
pub struct InFlight(Arc<Clock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// How long, after the gateway ends a connection, what the client still sends is read
/// and dropped; and how much of it at most.
///
/// A response that refuses a request before its body has arrived (`413`, a refused
/// key) is written while the client is still sending. Closing a socket with unread
/// bytes makes the kernel answer with a reset, which can destroy the response before
/// the client reads it. So the gateway first ends its side (FIN), then reads until the
/// client ends its own, as nginx's lingering close does, within these bounds.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// A connection's byte stream with its [`Clock`] enforced on reads.
pub struct ClockedIo<I> {
    inner: I,
    clock: Arc<Clock>,
    timer: Pin<Box<Sleep>>,
    armed_for: Option<Instant>,
    /// Once our side is shut: how many more bytes the client may send before we stop.
    lingering: Option<usize>,
}

impl<I> ClockedIo<I> {
    pub fn new(inner: I, clock: Arc<Clock>) -> Self {
        Self {
            inner,
            clock,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed_for: None,
            lingering: None,
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> ClockedIo<I> {
    /// Reads and drops what the client still sends until it ends its side, sends
    /// [`LINGER_BYTES`], fails, or [`LINGER_TIME`] passes.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut scratch = [0u8; 8 * 1024];
        // `Some(0)`: done, so a second shutdown returns at once.
        while let Some(left) = self.lingering.filter(|&left| left > 0) {
            let mut buf = ReadBuf::new(&mut scratch);
            self.lingering = match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() && buf.filled().len() < left => {
                    Some(left - buf.filled().len())
                }
                Poll::Ready(_) => Some(0),
                Poll::Pending => {
                    std::task::ready!(self.timer.as_mut().poll(cx));
                    Some(0)
                }
            };
        }
        Poll::Ready(())
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for ClockedIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if !read.is_empty() {
                    this.clock.on_read(read);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some((deadline, bound)) = this.clock.deadline(cx.waker()) else {
                    return Poll::Pending;
                };
                if this.armed_for != Some(deadline) {
                    this.timer.as_mut().reset(deadline);
                    this.armed_for = Some(deadline);
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => {
                        metrics::counter!("tollgate_connection_timeouts_total", "bound" => bound.label())
                            .increment(1);
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("connection {} timeout", bound.label()),
                        )))
                    }
                }
            }
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ClockedIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.lingering.is_none() {
            std::task::ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            this.lingering = Some(LINGER_BYTES);
            this.timer.as_mut().reset(Instant::now() + LINGER_TIME);
            this.armed_for = None;
        }
        std::task::ready!(this.poll_linger(cx));
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Waker {
        Waker::noop().clone()
    }

    fn clock() -> (Arc<Clock>, Instant) {
        let start = Instant::now();
        (
            Clock::new(Duration::from_secs(10), Duration::from_secs(60), start),
            start,
        )
    }

    #[test]
    fn a_new_connection_has_the_header_bound_from_its_accept_whatever_it_sends() {
        let (clock, start) = clock();
        clock.on_read(b"GET / HT");
        clock.on_read(b"T");
        assert_eq!(
            clock.deadline(&noop()),
            Some((start + Duration::from_secs(10), Bound::HeaderRead))
        );
    }

    #[test]
    fn nothing_is_bounded_while_a_request_is_in_flight_and_idle_starts_after_the_last() {
        let (clock, _) = clock();
        clock.on_read(b"GET / HTTP/1.1\r\n\r\n");
        let first = clock.request_started();
        let second = clock.request_started();
        assert_eq!(clock.deadline(&noop()), None);
        drop(first);
        assert_eq!(clock.deadline(&noop()), None);
        drop(second);
        let (_, bound) = clock.deadline(&noop()).unwrap();
        assert_eq!(bound, Bound::Idle);
    }

    #[test]
    fn the_first_byte_of_the_next_http1_request_starts_the_header_bound() {
        let (clock, _) = clock();
        clock.on_read(b"GET / HTTP/1.1\r\n\r\n");
        drop(clock.request_started());
        clock.on_read(b"G");
        let (_, bound) = clock.deadline(&noop()).unwrap();
        assert_eq!(bound, Bound::HeaderRead);
    }

    #[test]
    fn http2_control_frames_between_requests_leave_the_connection_idle() {
        let (clock, _) = clock();
        clock.on_read(&H2_PREFACE[..5]);
        clock.on_read(&H2_PREFACE[5..]);
        drop(clock.request_started());
        clock.on_read(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00ping-ack");
        let (_, bound) = clock.deadline(&noop()).unwrap();
        assert_eq!(bound, Bound::Idle);
    }
}
