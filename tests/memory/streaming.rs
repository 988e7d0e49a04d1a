//! Bodies stream through the gateway both ways: 100 MB each way in bounded memory.

use futures_util::StreamExt;

use crate::app::*;

const HUNDRED_MB: usize = 100 * 1024 * 1024;

fn peak_rss_bytes() -> usize {
    status_bytes("VmHWM:")
}

async fn call(app: &TestApp, path: &str, api_key: &str) -> reqwest::Response {
    app.client
        .get(app.url(path))
        .header("x-api-key", api_key)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_upload_and_download_pass_in_bounded_memory() {
    let _alone = measuring_alone().await;
    let app = spawn_app_with(|_| {}).await;
    let customer = app.signup().await;
    // Warm up connections and allocator pools before the baseline.
    assert_eq!(
        call(&app, "/vedic/v1/bytes/1048576", &customer.api_key)
            .await
            .status(),
        200
    );
    let baseline = peak_rss_bytes();

    let chunk = bytes::Bytes::from(vec![b'u'; 64 * 1024]);
    let upload = futures_util::stream::iter(
        (0..HUNDRED_MB / chunk.len()).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
    );
    let res = app
        .client
        .post(app.url("/vedic/v1/count"))
        .header("x-api-key", &customer.api_key)
        .header("content-length", HUNDRED_MB)
        .body(reqwest::Body::wrap_stream(upload))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let answer: serde_json::Value = res.json().await.unwrap();
    assert_eq!(answer["received_bytes"], HUNDRED_MB);

    let res = call(
        &app,
        &format!("/western/v1/bytes/{HUNDRED_MB}"),
        &customer.api_key,
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-length"],
        HUNDRED_MB.to_string().as_str()
    );
    let mut received = 0usize;
    let mut stream = res.bytes_stream();
    while let Some(chunk) = stream.next().await {
        received += chunk.unwrap().len();
    }
    assert_eq!(received, HUNDRED_MB);

    let growth = peak_rss_bytes().saturating_sub(baseline);
    assert!(
        growth < 40 * 1024 * 1024,
        "peak memory grew by {} MB while moving 200 MB",
        growth / (1024 * 1024)
    );
}
