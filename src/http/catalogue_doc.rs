//! The parts of `/openapi.json` that follow the running plan catalogue: which plan names
//! may leave out `monthly_allowance` in a subscription, and which plans redemption codes
//! may be minted for. Static annotations cannot say these; the document is built from
//! the catalogue in force (as the last reload left it), so it can.

use serde_json::{Value, json};

use crate::config::PlanConfig;

/// Whitespace as Rust's `trim` sees it, as a regular-expression class.
const SPACE: &str = r"[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// Adds the catalogue's rules to the schemas of `doc` (a serialized document).
pub(super) fn apply(doc: &mut Value, plans: &[PlanConfig]) {
    let schemas = &mut doc["components"]["schemas"];
    if let Some(subscription) = schemas.get_mut("SubscriptionRequest") {
        subscription_rule(subscription, plans);
    }
    if let Some(codes) = schemas.get_mut("CodesRequest") {
        codes_rule(codes, plans);
    }
}

/// `monthly_allowance` is required unless `plan`, trimmed, names a catalogue plan.
fn subscription_rule(schema: &mut Value, plans: &[PlanConfig]) {
    if plans.is_empty() {
        push_required(schema, "monthly_allowance");
        return;
    }
    schema["anyOf"] = json!([
        {"required": ["monthly_allowance"]},
        {"properties": {"plan": {"pattern": format!("^{SPACE}*(?:{}){SPACE}*$", alternatives(plans))}}},
    ]);
    schema["description"] = Value::String(format!(
        "`monthly_allowance` may be left out only when `plan` names a catalogue plan ({}).",
        names(plans)
    ));
}

/// Codes are minted only for a catalogue plan, named exactly.
fn codes_rule(schema: &mut Value, plans: &[PlanConfig]) {
    let plan = &mut schema["properties"]["plan"];
    if plans.is_empty() {
        plan["description"] =
            "A catalogue plan; this gateway has none, so every request answers 422.".into();
        return;
    }
    plan["enum"] = plans
        .iter()
        .map(|p| Value::String(p.name.clone()))
        .collect();
}

fn push_required(schema: &mut Value, field: &str) {
    match schema["required"].as_array_mut() {
        Some(required) => required.push(field.into()),
        None => schema["required"] = json!([field]),
    }
}

fn names(plans: &[PlanConfig]) -> String {
    plans
        .iter()
        .map(|p| format!("`{}`", p.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The plan names as regular-expression alternatives, their special characters escaped.
fn alternatives(plans: &[PlanConfig]) -> String {
    let escape = |name: &str| {
        let mut out = String::with_capacity(name.len());
        for c in name.chars() {
            if r"\.+*?()|[]{}^$".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
        out
    };
    plans
        .iter()
        .map(|p| escape(&p.name))
        .collect::<Vec<_>>()
        .join("|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::rules::Enforcement;

    fn plan(name: &str) -> PlanConfig {
        PlanConfig {
            name: name.into(),
            monthly_allowance: 10,
            daily_allowance: None,
            enforcement: Enforcement::Soft,
            price_id: None,
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            ..PlanConfig::default()
        }
    }

    #[test]
    fn catalogue_names_are_matched_exactly_after_trimming() {
        let mut schema = json!({"properties": {}});
        subscription_rule(&mut schema, &[plan("pro"), plan("Team (2026)+")]);
        let pattern = schema["anyOf"][1]["properties"]["plan"]["pattern"]
            .as_str()
            .unwrap();
        let re = fancy_regex::Regex::new(pattern).unwrap();
        for yes in ["pro", " pro\t", "Team (2026)+"] {
            assert!(re.is_match(yes).unwrap(), "{yes:?}");
        }
        for no in ["pr", "prox", "Pro", "Team 2026", "Team (2026)"] {
            assert!(!re.is_match(no).unwrap(), "{no:?}");
        }
    }

    #[test]
    fn without_a_catalogue_monthly_allowance_is_required() {
        let mut schema = json!({"required": ["plan"]});
        subscription_rule(&mut schema, &[]);
        assert_eq!(schema["required"], json!(["plan", "monthly_allowance"]));
    }
}
