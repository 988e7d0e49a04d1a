//! Where a configuration is read from: the config folder, the profile, the `--config`
//! file and the environment (SPEC §2), kept with the loaded configuration so a reload
//! reads the same layers (SPEC §20).

use std::path::PathBuf;

/// The inputs of [`Config::load`], separate from the process so tests can vary them. A
/// loaded configuration keeps them ([`Config::sources`]), so a reload reads the same
/// layers: the same files again, and the environment as the process started with it.
#[derive(Clone, Default)]
pub struct Sources {
    /// Folder holding `default.toml` and `<profile>.toml`. It must exist unless it is
    /// the default [`DEFAULT_DIR`] (a deployment configured by environment alone).
    pub dir: PathBuf,
    pub profile: Option<String>,
    /// The `--config FILE` layer.
    pub file: Option<PathBuf>,
    /// Environment variables; only `TOLLGATE__*` ones are read.
    pub env: Vec<(String, String)>,
}

impl Sources {
    /// Reads `TOLLGATE_CONFIG_DIR`, `TOLLGATE_PROFILE` and the environment of this process.
    pub fn from_process(file: Option<PathBuf>) -> Self {
        // Variables that are not UTF-8 cannot be ours; skip them rather than panic.
        let env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let dir = lookup(&env, "TOLLGATE_CONFIG_DIR")
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| DEFAULT_DIR.into());
        let profile = lookup(&env, "TOLLGATE_PROFILE").filter(|p| !p.is_empty());
        Self {
            dir: dir.into(),
            profile,
            file,
            env,
        }
    }

    /// What a loaded configuration keeps for reloads: the layers, and of the environment
    /// only tollgate's variables.
    pub(super) fn kept(&self) -> Self {
        Self {
            dir: self.dir.clone(),
            profile: self.profile.clone(),
            file: self.file.clone(),
            env: self
                .env
                .iter()
                .filter(|(name, _)| strip_prefix_ignore_case(name, ENV_PREFIX).is_some())
                .cloned()
                .collect(),
        }
    }
}

/// The environment holds secrets (`TOLLGATE__ADMIN__TOKEN`, ...): only the names of
/// tollgate's variables are shown, never a value.
impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .env
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| strip_prefix_ignore_case(name, ENV_PREFIX).is_some())
            .collect();
        f.debug_struct("Sources")
            .field("dir", &self.dir)
            .field("profile", &self.profile)
            .field("file", &self.file)
            .field("env", &names)
            .finish()
    }
}

/// The config folder when `TOLLGATE_CONFIG_DIR` names none; the only one that may be absent.
pub const DEFAULT_DIR: &str = "config";

fn lookup(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// The prefix of the variables that set keys.
pub(super) const ENV_PREFIX: &str = "TOLLGATE__";

pub(super) fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
}
