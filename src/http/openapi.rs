//! `/openapi.json`, generated from the handlers' annotations: the account API, plus the
//! admin API when `admin.token` turns it on (its paths, schemas and security scheme are
//! absent otherwise, like its routes).

use axum::Json;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::account::{
    analytics, audit, entitlements, key_limit, keys, plans, redeem, signup, usage,
};
use crate::admin::handlers as admin;
use crate::admin::{
    accounts as admin_accounts, analytics as admin_analytics, audit as admin_audit,
    codes as admin_codes, exports as admin_exports, reload as admin_reload, topups as admin_topups,
};
use crate::billing::webhook as billing;
use crate::config::{Config, PlanConfig};

/// The account API; always served.
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
        key_limit::patch_key,
        keys::roll_key,
        entitlements::entitlements,
        analytics::analytics,
        plans::list_plans,
        redeem::redeem,
        audit::list_audit,
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
        admin_reload::reload,
        admin_topups::create_grant,
        admin_accounts::list_accounts,
        admin_accounts::daily_usage,
        admin_analytics::account_analytics,
        admin_codes::create_codes,
        admin_exports::usage_export,
        admin_exports::account_exports,
        admin_audit::list_audit,
    ),
    modifiers(&AdminSecurity),
)]
pub struct AdminDoc;

/// The payment webhook; merged only when `billing.stripe_webhook_secret` turns it on.
#[derive(OpenApi)]
#[openapi(paths(billing::stripe_webhook))]
pub struct BillingDoc;

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
/// the API-key header this gateway is configured to read, and the rules of `config`'s
/// catalogue.
pub fn document(config: &Config) -> serde_json::Value {
    document_with(config, &config.plans)
}

/// [`document`] with the catalogue `plans` (the one in force, which a reload may have
/// replaced since `config` was loaded).
fn document_with(config: &Config, plans: &[PlanConfig]) -> serde_json::Value {
    let mut doc = ApiDoc::openapi();
    if config.admin.token.is_some() {
        doc.merge(AdminDoc::openapi());
    }
    if config.billing.stripe_webhook_secret.is_some() {
        doc.merge(BillingDoc::openapi());
    }
    if let Some(components) = doc.components.as_mut() {
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(
                config.upstream.key_header.clone(),
            ))),
        );
    }
    let mut doc = serde_json::to_value(doc).expect("the document serializes");
    super::catalogue_doc::apply(&mut doc, plans);
    admin_lockout(&mut doc);
    doc
}

/// Every operation behind the admin token may answer `429`: past
/// `admin.failures_per_hour` failed authentications from an address, even the right token
/// is refused there (SPEC §21). Written once here rather than on each handler.
fn admin_lockout(doc: &mut serde_json::Value) {
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    for operation in paths.values_mut().filter_map(|item| item.as_object_mut()) {
        for operation in operation.values_mut() {
            let admin = operation["security"]
                .as_array()
                .is_some_and(|schemes| schemes.iter().any(|s| s.get("admin").is_some()));
            let Some(responses) = operation
                .get_mut("responses")
                .and_then(|r| r.as_object_mut())
            else {
                continue;
            };
            if admin && !responses.contains_key("429") {
                responses.insert(
                    "429".into(),
                    serde_json::json!({
                        "description": "TOO_MANY_REQUESTS: more failed admin-token authentications from this address than `admin.failures_per_hour`; even the right token waits",
                        "headers": {"Retry-After": {"description": "Seconds to wait", "required": true, "schema": {"type": "integer", "format": "int64", "minimum": 0}}},
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
                    }),
                );
            }
        }
    }
}

pub async fn serve(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
) -> Json<serde_json::Value> {
    Json(document_with(&state.config, &state.catalogue.current()))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::account::signup::{MAX_EMAIL_CHARS, MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS};
    use crate::config::MAX_PLAN_CHARS;
    use crate::http::limits::MAX_BODY_BYTES;

    /// The whole document, admin API included.
    fn document() -> Value {
        let mut config = crate::config::Config::default();
        config.admin.token = Some("token".to_owned().into());
        config.billing.stripe_webhook_secret = Some("whsec_test".to_owned().into());
        serde_json::to_value(super::document(&config)).expect("the document serializes")
    }

    /// `(method, path, operation)` of every operation in the document.
    fn operations(doc: &Value) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("path item") {
                out.push((method.to_uppercase(), path.clone(), operation.clone()));
            }
        }
        out
    }

    #[test]
    fn every_operation_documents_every_error_it_can_answer() {
        let doc = document();
        let operations = operations(&doc);
        assert_eq!(operations.len(), 26, "an operation was added or lost");
        for (method, path, operation) in operations {
            let responses = operation["responses"].as_object().expect("responses");
            let missing = |statuses: &[&str]| -> Vec<String> {
                statuses
                    .iter()
                    .filter(|s| !responses.contains_key(**s))
                    .map(|s| s.to_string())
                    .collect()
            };
            let takes_json = operation["requestBody"]["content"]
                .get("application/json")
                .is_some();
            if takes_json {
                let lacking = missing(&["400", "413", "415", "422"]);
                assert!(lacking.is_empty(), "{method} {path} lacks {lacking:?}");
            }
            let needs_auth = operation["security"]
                .as_array()
                .is_some_and(|schemes| !schemes.is_empty());
            if needs_auth {
                assert!(missing(&["401"]).is_empty(), "{method} {path} lacks 401");
            }
            let admin = operation["security"]
                .as_array()
                .is_some_and(|schemes| schemes.iter().any(|s| s.get("admin").is_some()));
            if admin {
                assert!(missing(&["429"]).is_empty(), "{method} {path} lacks 429");
            }
            // The catalogue comes from configuration: nothing there can be unavailable.
            let reads_config_only = path == "/account/v1/plans";
            let expected: &[&str] = if reads_config_only {
                &["500"]
            } else {
                &["500", "503"]
            };
            let lacking = missing(expected);
            assert!(lacking.is_empty(), "{method} {path} lacks {lacking:?}");
            if path.contains('{') {
                assert!(missing(&["404"]).is_empty(), "{method} {path} lacks 404");
            }

            for (status, response) in responses {
                if status.as_str() < "400" {
                    continue;
                }
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status} has another body"
                );
                let description = response["description"].as_str().unwrap_or_default();
                let code = description.split(':').next().unwrap_or_default();
                assert!(
                    !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
                    "{method} {path} {status} does not name its code: {description:?}"
                );
            }
        }
    }

    #[test]
    fn request_schemas_carry_the_handlers_limits() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];

        let signup = &schemas["SignupRequest"]["properties"];
        assert_eq!(signup["password"]["minLength"], MIN_PASSWORD_CHARS);
        assert_eq!(signup["password"]["maxLength"], MAX_PASSWORD_CHARS);
        assert_eq!(signup["email"]["maxLength"], MAX_EMAIL_CHARS);
        assert!(signup["email"]["pattern"].is_string());
        // Signup refuses unknown fields, as every account and admin route does.
        assert_eq!(schemas["SignupRequest"]["additionalProperties"], false);
        assert_eq!(schemas["LoginRequest"]["additionalProperties"], false);

        let login = &schemas["LoginRequest"]["properties"];
        assert_eq!(login["password"]["maxLength"], MAX_PASSWORD_CHARS);
        assert_eq!(login["email"]["maxLength"], MAX_EMAIL_CHARS);

        let subscription = &schemas["SubscriptionRequest"];
        assert_eq!(subscription["additionalProperties"], false);
        let fields = &subscription["properties"];
        assert_eq!(fields["monthly_allowance"]["minimum"], 0);
        let plan = fields["plan"]["pattern"].as_str().expect("plan pattern");
        assert!(plan.contains(&format!("{{0,{}}}", MAX_PLAN_CHARS - 2)));
        for field in ["starts_at", "expires_at"] {
            assert_eq!(fields[field]["format"], "date-time", "{field}");
        }
        // The test catalogue is empty: every plan is free text and needs its allowance.
        let required = subscription["required"].as_array().expect("required");
        assert!(
            required.contains(&"monthly_allowance".into()),
            "{subscription}"
        );

        let grant = &schemas["GrantRequest"]["properties"]["calls"];
        assert_eq!(grant["minimum"], 1);
        assert_eq!(grant["maximum"], crate::usage::requests::MAX_CALLS);
        let codes = &schemas["CodesRequest"]["properties"];
        assert_eq!(codes["months"]["minimum"], 1);
        assert_eq!(codes["months"]["maximum"], crate::admin::codes::MAX_MONTHS);
        assert_eq!(codes["count"]["minimum"], 1);
        assert_eq!(codes["count"]["maximum"], crate::admin::codes::MAX_COUNT);

        // Every field of a PATCH is optional (null clears it); unknown ones are refused.
        let change = &schemas["KeyPatch"];
        assert!(change.get("required").is_none(), "{change}");
        assert_eq!(change["additionalProperties"], false);
        assert_eq!(schemas["NewKey"]["additionalProperties"], false);
        assert_eq!(schemas["RollKey"]["additionalProperties"], false);
        assert_eq!(change["properties"]["monthly_limit"]["minimum"], 0);
        let name = &schemas["NewKey"]["properties"]["name"];
        assert_eq!(name["maxLength"], crate::accounts::keys::MAX_KEY_NAME_CHARS);
        let grace = &schemas["RollKey"]["properties"]["grace_seconds"];
        assert_eq!(grace["maximum"], crate::accounts::keys::MAX_GRACE_SECONDS);
        let rate = &schemas["RateLimit"]["properties"];
        assert_eq!(rate["per_second"]["maximum"], crate::plan::MAX_PER_SECOND);

        // An audit event names its actor among the four the table allows.
        let event = &schemas["AuditEvent"]["properties"];
        assert_eq!(event["actor"]["$ref"], "#/components/schemas/Actor");
        assert_eq!(
            schemas["Actor"]["enum"],
            serde_json::json!(["account", "admin", "stripe", "system"])
        );
    }

    #[test]
    fn query_parameters_carry_the_handlers_limits() {
        let doc = document();
        let parameter = |path: &str, name: &str| -> Value {
            doc["paths"][path]["get"]["parameters"]
                .as_array()
                .expect("parameters")
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{path} {name}"))["schema"]
                .clone()
        };
        let limit = parameter("/admin/v1/accounts", "limit");
        assert_eq!(limit["minimum"], 1);
        assert_eq!(limit["maximum"], crate::admin::accounts::MAX_LIMIT);
        let q = parameter("/admin/v1/accounts", "q");
        assert_eq!(q["maxLength"], 254);
        assert!(q["pattern"].is_string());
        assert_eq!(
            parameter("/admin/v1/accounts", "cursor")["pattern"],
            "^[0-9]{0,18}$"
        );
        let keys = parameter("/account/v1/keys", "limit");
        assert_eq!(keys["minimum"], 1);
        assert_eq!(keys["maximum"], crate::account::keys::MAX_PAGE);
        let windows = parameter("/admin/v1/accounts/{account_id}/exports", "limit");
        assert_eq!(windows["minimum"], 1);
        assert_eq!(windows["maximum"], crate::admin::exports::MAX_WINDOWS);
        for path in ["/admin/v1/audit", "/account/v1/audit"] {
            let limit = parameter(path, "limit");
            assert_eq!(limit["minimum"], 1, "{path}");
            assert_eq!(limit["maximum"], crate::audit::read::MAX_LIMIT, "{path}");
            assert_eq!(parameter(path, "cursor")["pattern"], "^[0-9]{0,18}$");
        }
        let actions = parameter("/admin/v1/audit", "action");
        let listed: Vec<&str> = crate::audit::Action::ALL
            .iter()
            .map(|a| a.as_str())
            .collect();
        assert_eq!(actions["enum"], serde_json::json!(listed), "{actions}");
    }

    #[test]
    fn the_catalogue_says_which_plans_may_leave_out_their_allowance() {
        let mut config = crate::config::Config::default();
        config.admin.token = Some("token".to_owned().into());
        config.plans = vec![crate::config::PlanConfig {
            name: "pro".into(),
            monthly_allowance: 10,
            daily_allowance: None,
            enforcement: Default::default(),
            price_id: None,
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            ..Default::default()
        }];
        let doc = super::document(&config);
        let schemas = &doc["components"]["schemas"];
        let subscription = &schemas["SubscriptionRequest"];
        assert_eq!(
            subscription["anyOf"][0]["required"],
            serde_json::json!(["monthly_allowance"])
        );
        assert!(
            subscription["anyOf"][1]["properties"]["plan"]["pattern"]
                .as_str()
                .is_some_and(|p| p.contains("(?:pro)"))
        );
        assert_eq!(
            schemas["CodesRequest"]["properties"]["plan"]["enum"],
            serde_json::json!(["pro"])
        );
    }

    #[test]
    fn the_body_limit_named_in_the_document_is_the_one_enforced() {
        assert_eq!(MAX_BODY_BYTES, 16 * 1024);
        let doc = document();
        for (method, path, operation) in operations(&doc) {
            if let Some(too_large) = operation["responses"].get("413") {
                let description = too_large["description"].as_str().unwrap_or_default();
                assert!(description.contains("16 KiB"), "{method} {path}");
            }
        }
    }

    #[test]
    fn parameters_are_where_the_handlers_read_them() {
        let doc = document();
        for (method, path, operation) in operations(&doc) {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                let name = parameter["name"].as_str().expect("parameter name");
                if parameter["in"] == "path" {
                    assert!(
                        path.contains(&format!("{{{name}}}")),
                        "{method} {path} {name}"
                    );
                    assert_eq!(parameter["schema"]["type"], "integer", "{method} {path}");
                }
                if name == "month" {
                    assert_eq!(parameter["in"], "query", "{method} {path}");
                    assert_ne!(parameter["required"], true, "{method} {path}");
                    assert_eq!(parameter["schema"]["type"], "string", "{method} {path}");
                    assert_eq!(
                        parameter["schema"]["pattern"],
                        "^(?!9999-12)(19[7-9][0-9]|[2-9][0-9]{3})-(0[1-9]|1[0-2])$",
                        "{method} {path}"
                    );
                }
            }
        }
    }
}
