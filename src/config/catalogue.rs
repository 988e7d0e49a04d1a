//! The plan catalogue as it stands (SPEC §11, §20): the `[[plans]]` on offer and the free
//! grant's terms (`usage.free_features`, `usage.free_rate_limit`), behind one live handle
//! a reload replaces whole.
//!
//! Everything that offers, names or activates a plan reads it here, not from the
//! configuration loaded at start: the admin API, the console, the portal's plans page,
//! redemption codes and payment activation. Each reads one [`Plans`] snapshot per request,
//! so a reload in the middle of one cannot show it two catalogues. Subscriptions copy
//! their figures when activated, so a reload never changes one already active.

use std::ops::Deref;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::plans::PlanConfig;
use super::settings::Config;
use crate::plan::PlanTerms;

/// The live catalogue. Cheap to clone; clones share what a reload puts in.
#[derive(Debug, Clone, Default)]
pub struct Catalogue(Arc<ArcSwap<Offer>>);

/// What one reload put in: the plans and the free grant's terms, swapped together.
#[derive(Debug, Default)]
struct Offer {
    plans: Arc<Plans>,
    free: Arc<PlanTerms>,
}

/// The catalogue's plans at one moment, in configuration order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plans(Vec<PlanConfig>);

impl Catalogue {
    pub fn new(plans: Vec<PlanConfig>, free: PlanTerms) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(Offer::new(plans, free))))
    }

    /// The catalogue of a (validated) configuration.
    pub fn from_config(config: &Config) -> Self {
        Self::new(config.plans.clone(), config.usage.free_terms())
    }

    /// The plans on offer now.
    pub fn current(&self) -> Arc<Plans> {
        self.0.load().plans.clone()
    }

    /// The catalogue plan called exactly `name`, as it stands now.
    pub fn plan(&self, name: &str) -> Option<PlanConfig> {
        self.0.load().plans.plan(name).cloned()
    }

    /// The features and rate limit of the catalogue plan named `plan`; none elsewhere.
    pub fn terms(&self, plan: &str) -> PlanTerms {
        self.0
            .load()
            .plans
            .plan(plan)
            .map(PlanConfig::terms)
            .unwrap_or_default()
    }

    /// The free grant's features and rate limit.
    pub fn free_terms(&self) -> Arc<PlanTerms> {
        self.0.load().free.clone()
    }

    /// Puts `config`'s plans and free terms in force for every reader at once.
    pub fn replace(&self, config: &Config) {
        self.0.store(Arc::new(Offer::new(
            config.plans.clone(),
            config.usage.free_terms(),
        )));
    }
}

/// A catalogue of `plans` and a free grant without features or rate limit (tests, tools).
impl From<Vec<PlanConfig>> for Catalogue {
    fn from(plans: Vec<PlanConfig>) -> Self {
        Self::new(plans, PlanTerms::default())
    }
}

impl Offer {
    fn new(plans: Vec<PlanConfig>, free: PlanTerms) -> Self {
        Self {
            plans: Arc::new(Plans(plans)),
            free: Arc::new(free),
        }
    }
}

impl Plans {
    /// The plan called exactly `name`.
    pub fn plan(&self, name: &str) -> Option<&PlanConfig> {
        self.0.iter().find(|p| p.name == name)
    }

    /// The plan paid for by `price_id`.
    pub fn plan_by_price(&self, price_id: &str) -> Option<&PlanConfig> {
        self.0
            .iter()
            .find(|p| p.price_id.as_deref() == Some(price_id))
    }
}

impl Deref for Plans {
    type Target = [PlanConfig];

    fn deref(&self) -> &[PlanConfig] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(name: &str, monthly_allowance: i64) -> PlanConfig {
        PlanConfig {
            name: name.into(),
            monthly_allowance,
            daily_allowance: None,
            enforcement: Default::default(),
            price_id: Some(format!("price_{name}")),
            checkout_url: None,
            features: vec![name.into()],
            rate_limit: None,
            ..PlanConfig::default()
        }
    }

    #[test]
    fn a_replaced_catalogue_is_what_every_clone_reads_next() {
        let catalogue = Catalogue::from(vec![plan("basic", 100)]);
        let elsewhere = catalogue.clone();
        let before = catalogue.current();

        let mut config = Config {
            plans: vec![plan("basic", 200), plan("pro", 1_000)],
            ..Config::default()
        };
        config.usage.free_features = vec!["free".into()];
        catalogue.replace(&config);

        assert_eq!(
            elsewhere.plan("basic").map(|p| p.monthly_allowance),
            Some(200)
        );
        assert_eq!(elsewhere.terms("pro").features, vec!["pro".to_owned()]);
        assert_eq!(elsewhere.terms("gold"), PlanTerms::default());
        assert_eq!(elsewhere.free_terms().features, vec!["free".to_owned()]);
        let now = elsewhere.current();
        assert_eq!(
            now.plan_by_price("price_pro").map(|p| p.name.as_str()),
            Some("pro")
        );
        assert_eq!(now.len(), 2);
        // A snapshot taken before stays what it was.
        assert_eq!(before.len(), 1);
        assert_eq!(before.plan("basic").map(|p| p.monthly_allowance), Some(100));
    }
}
