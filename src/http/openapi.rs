//! `/openapi.json`, generated from the handlers' annotations: the account API, plus the
//! admin API when `admin.token` turns it on (its paths, schemas and security scheme are
//! absent otherwise, like its routes).

use axum::Json;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::account::{keys, signup, usage};
use crate::admin::handlers as admin;
use crate::admin::{accounts as admin_accounts, topups as admin_topups};
use crate::config::Config;

/// The account API; always served.
#[derive(OpenApi)]
#[openapi(
    info(title = "tollgate", description = "Account and admin API of the tollgate metering gateway."),
    paths(
        signup::signup,
        signup::login,
        usage::usage,
        keys::create_key,
        keys::list_keys,
        keys::revoke_key,
    ),
    modifiers(&Security),
)]
pub struct ApiDoc;

/// The admin API; merged into [`ApiDoc`] only when `admin.token` turns it on.
#[derive(OpenApi)]
#[openapi(
    paths(
        admin::create_subscription,
        admin::account_usage,
        admin::reconcile,
        admin_topups::create_grant,
        admin_accounts::list_accounts,
        admin_accounts::daily_usage,
    ),
    modifiers(&AdminSecurity),
)]
pub struct AdminDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("session", bearer());
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key"))),
        );
    }
}

struct AdminSecurity;

impl Modify for AdminSecurity {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("admin", bearer());
    }
}

fn bearer() -> SecurityScheme {
    SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build())
}

/// The document of the routes this gateway serves: the admin API only when it is on,
/// and the API-key header this gateway is configured to read.
pub fn document(config: &Config) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    if config.admin.token.is_some() {
        doc.merge(AdminDoc::openapi());
    }
    if let Some(components) = doc.components.as_mut() {
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(
                config.upstream.key_header.clone(),
            ))),
        );
    }
    doc
}

pub async fn serve(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
) -> Json<utoipa::openapi::OpenApi> {
    Json(document(&state.config))
}
