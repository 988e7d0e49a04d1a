//! Field deserializers shared by the configuration's sections: every value may come
//! from TOML (typed) or from an environment variable (text).

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Deserialize;

/// Deserializes a typed value given natively (TOML) or as text (environment).
pub fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + std::str::FromStr,
    T::Err: std::fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given<T> {
        Typed(T),
        Text(String),
    }
    match Given::<T>::deserialize(deserializer)? {
        Given::Typed(value) => Ok(value),
        // `True`/`FALSE` read like `true`/`false`.
        Given::Text(text) => text
            .trim()
            .parse()
            .or_else(|_| text.trim().to_ascii_lowercase().parse())
            .map_err(|e| serde::de::Error::custom(format!("`{text}`: {e}"))),
    }
}

/// Deserializes a CIDR list given as a TOML array or, from the environment, as
/// comma-separated text. A bare address stands for itself (`/32` or `/128`).
pub fn cidr_list<'de, D>(deserializer: D) -> Result<Vec<IpNet>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        List(Vec<String>),
        Text(String),
    }
    let items = match Given::deserialize(deserializer)? {
        Given::List(items) => items,
        Given::Text(text) => text.split(',').map(str::to_owned).collect(),
    };
    items
        .iter()
        .map(|item| item.trim())
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| serde::de::Error::custom(format!("`{item}` is not a CIDR block")))
        })
        .collect()
}
