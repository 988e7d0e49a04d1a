//! A webhook receiver on port 0 that records every request and answers as the test
//! says: 2xx, a status, no answer at all (hang), or nothing listening (down). Chosen
//! accounts or thresholds may be made to fail on their own.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    Status(u16),
    /// Reads the request and never answers.
    Hang,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub signature: Option<String>,
    pub content_type: Option<String>,
    pub body: Bytes,
    pub json: Value,
    /// What the receiver answered (`None`: it hung).
    pub answered: Option<u16>,
}

impl Received {
    pub fn id(&self) -> String {
        self.json["id"].as_str().expect("an id").to_owned()
    }

    pub fn account_id(&self) -> i64 {
        self.json["account_id"].as_i64().expect("an account_id")
    }

    pub fn threshold(&self) -> i64 {
        self.json["threshold"].as_i64().expect("a threshold")
    }

    pub fn delivered(&self) -> bool {
        self.answered.is_some_and(|s| (200..300).contains(&s))
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Received>>,
    answer: Mutex<Option<Answer>>,
    failing_accounts: Mutex<HashSet<i64>>,
    failing_thresholds: Mutex<HashSet<i64>>,
    delay: Mutex<Duration>,
}

/// The receiver; [`Receiver::down`] closes its port, [`Receiver::up`] opens it again.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        *shared.answer.lock().unwrap() = Some(Answer::Ok);
        let mut receiver = Self {
            addr,
            shared,
            server: None,
        };
        receiver.serve(listener);
        receiver
    }

    pub fn url(&self) -> String {
        format!("http://{}/hooks/tollgate", self.addr)
    }

    fn serve(&mut self, listener: TcpListener) {
        let app = Router::new()
            .route("/hooks/tollgate", post(receive))
            .with_state(Arc::clone(&self.shared));
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        self.server = Some((tx, task));
    }

    /// Nothing listens any more: connections are refused.
    pub async fn down(&mut self) {
        if let Some((tx, task)) = self.server.take() {
            let _ = tx.send(());
            // Hanging requests keep a graceful shutdown waiting; the port closes anyway.
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(1), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }

    /// Listens again on the same port.
    pub async fn up(&mut self) {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(self.addr).unwrap();
        self.serve(socket.listen(128).unwrap());
    }

    pub fn answer(&self, answer: Answer) {
        *self.shared.answer.lock().unwrap() = Some(answer);
    }

    /// Waits this long before answering each request.
    pub fn delay(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// Requests about `account_id` get a 500 until [`Receiver::heal`].
    pub fn fail_account(&self, account_id: i64) {
        self.shared
            .failing_accounts
            .lock()
            .unwrap()
            .insert(account_id);
    }

    /// Requests about `threshold` get a 500 until [`Receiver::heal`].
    pub fn fail_threshold(&self, threshold: i64) {
        self.shared
            .failing_thresholds
            .lock()
            .unwrap()
            .insert(threshold);
    }

    pub fn heal(&self) {
        self.shared.failing_accounts.lock().unwrap().clear();
        self.shared.failing_thresholds.lock().unwrap().clear();
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The requests answered 2xx, in arrival order.
    pub fn delivered(&self) -> Vec<Received> {
        self.requests()
            .into_iter()
            .filter(Received::delivered)
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some((tx, task)) = self.server.take() {
            let _ = tx.send(());
            task.abort();
        }
    }
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answer = shared.answer.lock().unwrap().unwrap_or(Answer::Ok);
    let failing = json["account_id"]
        .as_i64()
        .is_some_and(|a| shared.failing_accounts.lock().unwrap().contains(&a))
        || json["threshold"]
            .as_i64()
            .is_some_and(|t| shared.failing_thresholds.lock().unwrap().contains(&t));
    let status = match answer {
        Answer::Hang => None,
        _ if failing => Some(500),
        Answer::Ok => Some(200),
        Answer::Status(status) => Some(status),
    };
    shared.requests.lock().unwrap().push(Received {
        signature: header("tollgate-signature"),
        content_type: header("content-type"),
        body,
        json,
        answered: status,
    });
    let delay = *shared.delay.lock().unwrap();
    let Some(status) = status else {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        return StatusCode::OK;
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    StatusCode::from_u16(status).unwrap()
}
