//! The Workers KV REST client: read, write, delete and list keys of one namespace.
//!
//! Each public operation is one guarded call (see `call.rs`) — or, for `list_all` and large
//! bulk slices, a few. Callers treat every error as fail-open; "key absent" is `Ok(None)`.

use std::sync::Arc;

use bytes::Bytes;
use reqwest::RequestBuilder;
use reqwest::header::CONTENT_TYPE;
use serde::{Deserialize, Serialize};

use super::call::{self, Answer, Caller, Op};
use super::error::KvError;
use super::settings::KvSettings;
use super::wire::{self, BulkResult, KEY_NOT_FOUND};

/// Most items Cloudflare accepts in one bulk request; longer slices are sent in chunks.
const MAX_BULK_ITEMS: usize = 10_000;
/// Page size of `list_all`, the largest Cloudflare allows.
const MAX_LIST_LIMIT: u32 = 1_000;
/// Smallest page size Cloudflare allows.
const MIN_LIST_LIMIT: u32 = 10;

/// One page of a key listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPage {
    pub keys: Vec<KeyInfo>,
    /// Where the next page starts; `None` on the last page.
    pub cursor: Option<String>,
}

/// A listed key and, when it has one, its expiration in Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KeyInfo {
    pub name: String,
    #[serde(default)]
    pub expiration: Option<i64>,
}

/// One item of a bulk write; `value` is stored as UTF-8 text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BulkWrite {
    pub key: String,
    pub value: String,
    /// Unix seconds; Cloudflare refuses values less than 60 s in the future.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration: Option<i64>,
}

/// Client of one KV namespace. Cheap to clone; clones share the budget and the back-off.
#[derive(Debug, Clone)]
pub struct KvClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `{api_base}/accounts/{account}/storage/kv/namespaces/{namespace}`
    namespace_url: String,
    caller: Caller,
}

impl KvClient {
    /// A client of the namespace in `settings`, sending through `http`.
    pub fn new(settings: KvSettings, http: reqwest::Client) -> Self {
        let namespace_url = format!(
            "{}/accounts/{}/storage/kv/namespaces/{}",
            settings.api_base.trim_end_matches('/'),
            wire::encode_segment(&settings.account_id),
            wire::encode_segment(&settings.namespace_id),
        );
        let caller = Caller::new(
            http,
            settings.api_token,
            settings.call_timeout,
            settings.budget,
            settings.shared_budget,
        );
        Self {
            inner: Arc::new(Inner {
                namespace_url,
                caller,
            }),
        }
    }

    /// Reads a value; `Ok(None)` when the key is absent (404 with code 10009).
    #[tracing::instrument(name = "kv_get", skip_all, fields(key = %key))]
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, KvError> {
        let outcome = async {
            let url = self.value_url(key)?;
            let answer = self.execute(Op::Get, self.http().get(url)).await?;
            if answer.status.is_success() {
                return Ok(Some(answer.body));
            }
            match wire::api_error(answer.status, &answer.body) {
                // Cloudflare's "key not found"; a bare 404 without any error code
                // (no envelope) reads the same, an envelope naming another error
                // (wrong namespace, account) does not.
                KvError::Api {
                    status: 404,
                    code: Some(KEY_NOT_FOUND) | None,
                    ..
                } => Ok(None),
                error => Err(error),
            }
        }
        .await;
        let absent = matches!(outcome, Ok(None));
        call::record(Op::Get, &outcome, absent);
        outcome
    }

    /// Writes a value, expiring at `expiration_unix` (Unix seconds) when given. Cloudflare
    /// refuses expirations less than 60 s in the future with a 400 `Api` error.
    #[tracing::instrument(name = "kv_put", skip_all, fields(key = %key, expiration = ?expiration_unix))]
    pub async fn put(
        &self,
        key: &str,
        value: &[u8],
        expiration_unix: Option<i64>,
    ) -> Result<(), KvError> {
        let outcome = async {
            let url = self.value_url(key)?;
            let mut request = self
                .http()
                .put(url)
                .header(CONTENT_TYPE, "application/octet-stream")
                .body(value.to_vec());
            if let Some(expiration) = expiration_unix {
                request = request.query(&[("expiration", expiration)]);
            }
            let answer = self.execute(Op::Put, request).await?;
            answer.accepted()
        }
        .await;
        call::record(Op::Put, &outcome, false);
        outcome
    }

    /// Deletes a key; deleting an absent key succeeds.
    #[tracing::instrument(name = "kv_delete", skip_all, fields(key = %key))]
    pub async fn delete(&self, key: &str) -> Result<(), KvError> {
        let outcome = async {
            let url = self.value_url(key)?;
            let answer = self.execute(Op::Delete, self.http().delete(url)).await?;
            match answer.accepted() {
                // Already gone is what a delete wants.
                Err(KvError::Api {
                    status: 404,
                    code: Some(KEY_NOT_FOUND),
                    ..
                }) => Ok(()),
                other => other,
            }
        }
        .await;
        call::record(Op::Delete, &outcome, false);
        outcome
    }

    /// Lists up to `limit` keys starting with `prefix`, sorted by name, from `cursor` on.
    /// `limit` is clamped to Cloudflare's 10..=1000.
    #[tracing::instrument(name = "kv_list", skip_all, fields(prefix = %prefix))]
    pub async fn list_page(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<KeyPage, KvError> {
        let outcome = async {
            let limit = limit.clamp(MIN_LIST_LIMIT, MAX_LIST_LIMIT);
            let mut request = self
                .http()
                .get(format!("{}/keys", self.inner.namespace_url))
                .query(&[("limit", limit)]);
            if !prefix.is_empty() {
                request = request.query(&[("prefix", prefix)]);
            }
            if let Some(cursor) = cursor {
                request = request.query(&[("cursor", cursor)]);
            }
            let answer = self.execute(Op::List, request).await?;
            let envelope = answer.envelope::<Vec<KeyInfo>>()?;
            let cursor = envelope
                .result_info
                .and_then(|info| info.cursor)
                .filter(|cursor| !cursor.is_empty());
            Ok(KeyPage {
                keys: envelope.result.unwrap_or_default(),
                cursor,
            })
        }
        .await;
        call::record(Op::List, &outcome, false);
        outcome
    }

    /// Lists every key starting with `prefix`, following the cursor with pages of 1,000.
    /// Each page is one call (and one budget permit); any failed page fails the whole list.
    pub async fn list_all(&self, prefix: &str) -> Result<Vec<KeyInfo>, KvError> {
        let mut keys = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .list_page(prefix, cursor.as_deref(), MAX_LIST_LIMIT)
                .await?;
            keys.extend(page.keys);
            match page.cursor {
                None => return Ok(keys),
                Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                    return Err(KvError::UnexpectedResponse(
                        "the key listing returned the same cursor twice".to_owned(),
                    ));
                }
                next => cursor = next,
            }
        }
    }

    /// Writes many values, in requests of at most 10,000 items. Items Cloudflare reports as
    /// not written come back as `Incomplete`.
    #[tracing::instrument(name = "kv_bulk_put", skip_all, fields(items = items.len()))]
    pub async fn bulk_put(&self, items: &[BulkWrite]) -> Result<(), KvError> {
        self.bulk(Op::BulkPut, items, |http, url| {
            http.put(format!("{url}/bulk"))
        })
        .await
    }

    /// Deletes many keys, in requests of at most 10,000 keys (`POST /bulk/delete`).
    #[tracing::instrument(name = "kv_bulk_delete", skip_all, fields(keys = keys.len()))]
    pub async fn bulk_delete(&self, keys: &[String]) -> Result<(), KvError> {
        self.bulk(Op::BulkDelete, keys, |http, url| {
            http.post(format!("{url}/bulk/delete"))
        })
        .await
    }

    async fn bulk<T: Serialize>(
        &self,
        op: Op,
        items: &[T],
        request: impl Fn(&reqwest::Client, &str) -> RequestBuilder,
    ) -> Result<(), KvError> {
        let mut unsuccessful_keys = Vec::new();
        for chunk in items.chunks(MAX_BULK_ITEMS) {
            let outcome = async {
                let builder = request(self.http(), &self.inner.namespace_url).json(chunk);
                let answer = self.execute(op, builder).await?;
                let result = answer.envelope::<BulkResult>()?.result;
                let failed = result.unwrap_or_default().unsuccessful_keys;
                if failed.is_empty() {
                    Ok(())
                } else {
                    Err(KvError::Incomplete {
                        unsuccessful_keys: failed,
                    })
                }
            }
            .await;
            call::record(op, &outcome, false);
            match outcome {
                Err(KvError::Incomplete {
                    unsuccessful_keys: failed,
                }) => {
                    unsuccessful_keys.extend(failed);
                }
                other => other?,
            }
        }
        if unsuccessful_keys.is_empty() {
            Ok(())
        } else {
            Err(KvError::Incomplete { unsuccessful_keys })
        }
    }

    fn http(&self) -> &reqwest::Client {
        &self.inner.caller.http
    }

    async fn execute(&self, op: Op, request: RequestBuilder) -> Result<Answer, KvError> {
        self.inner.caller.execute(op, request).await
    }

    fn value_url(&self, key: &str) -> Result<String, KvError> {
        wire::check_key(key)?;
        Ok(format!(
            "{}/values/{}",
            self.inner.namespace_url,
            wire::encode_segment(key)
        ))
    }
}
