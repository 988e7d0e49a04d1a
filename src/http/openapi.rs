//! `/openapi.json`, generated from the handlers' annotations.

use axum::Json;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::account::{keys, plans, redeem, signup, usage};
use crate::admin::handlers as admin;
use crate::admin::{accounts as admin_accounts, codes as admin_codes, topups as admin_topups};
use crate::billing::webhook as billing;

#[derive(OpenApi)]
#[openapi(
    info(title = "tollgate", description = "Account, admin and billing API of the tollgate metering gateway."),
    paths(
        signup::signup,
        signup::login,
        usage::usage,
        keys::create_key,
        keys::list_keys,
        keys::revoke_key,
        plans::list_plans,
        redeem::redeem,
        admin::create_subscription,
        admin::account_usage,
        admin::reconcile,
        admin_topups::create_grant,
        admin_accounts::list_accounts,
        admin_accounts::daily_usage,
        admin_codes::create_codes,
        billing::stripe_webhook,
    ),
    modifiers(&Security),
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer =
            || SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build());
        components.add_security_scheme("session", bearer());
        components.add_security_scheme("admin", bearer());
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key"))),
        );
    }
}

/// The document, with the API-key header this gateway is configured to read.
pub async fn serve(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
) -> Json<utoipa::openapi::OpenApi> {
    let mut doc = ApiDoc::openapi();
    if let Some(components) = doc.components.as_mut() {
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(
                state.config.upstream.key_header.clone(),
            ))),
        );
    }
    Json(doc)
}
