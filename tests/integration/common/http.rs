//! Requests to a test gateway as customers and the operator make them, and the one
//! check of a JSON error answer.

use reqwest::Response;
use serde_json::{Value, json};

use super::{ADMIN_TOKEN, TestApp};

/// A signed-up customer.
#[derive(Debug, Clone)]
pub struct Customer {
    pub account_id: i64,
    pub key_id: i64,
    pub api_key: String,
    pub email: String,
    pub password: String,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Signs up a fresh customer.
    pub async fn signup(&self) -> Customer {
        let email = format!("{}@example.com", uuid::Uuid::new_v4().simple());
        let password = "correct horse battery".to_owned();
        let res = self
            .post_json(
                "/account/v1/signup",
                &json!({"email": email, "password": password}),
            )
            .await;
        assert_eq!(res.status(), 201, "signup");
        let body: Value = res.json().await.unwrap();
        Customer {
            account_id: body["account_id"].as_i64().unwrap(),
            key_id: body["key_id"].as_i64().unwrap(),
            api_key: body["api_key"].as_str().unwrap().to_owned(),
            email,
            password,
        }
    }

    /// Logs a customer in and returns the session token.
    pub async fn login(&self, customer: &Customer) -> String {
        let res = self
            .post_json(
                "/account/v1/login",
                &json!({"email": customer.email, "password": customer.password}),
            )
            .await;
        assert_eq!(res.status(), 200, "login");
        let body: Value = res.json().await.unwrap();
        body["token"].as_str().unwrap().to_owned()
    }

    /// One proxied GET with an API key.
    pub async fn call(&self, path: &str, api_key: &str) -> Response {
        self.client
            .get(self.url(path))
            .header("x-api-key", api_key)
            .send()
            .await
            .unwrap()
    }

    pub async fn admin_post(&self, path: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn admin_get(&self, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// The admin usage object of an account in the current month.
    pub async fn usage_of(&self, account_id: i64) -> Value {
        let res = self
            .admin_get(&format!("/admin/v1/accounts/{account_id}/usage"))
            .await;
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }
}

/// Asserts a JSON error answer: this status, this `code` and a non-empty `message`.
pub async fn assert_error(res: Response, status: u16, code: &str) {
    let url = res.url().clone();
    let actual = res.status();
    let text = res.text().await.expect("an error body");
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{url} answered {actual} with a non-JSON body ({e}): {text}"));
    assert_eq!(actual, status, "{url}: expected {code}, got {body}");
    assert_eq!(body["code"], code, "{url}: {body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "{url}: {body}");
}
