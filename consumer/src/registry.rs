//! The schema registry client's settings, from the config.

use std::time::Duration;

use anyhow::Context;
use lakesink_config::{RegistryApi, RegistryConfig};
use lakesink_schema_registry::{Api, Auth, HttpRegistryConfig};

pub(crate) fn config(r: &RegistryConfig) -> anyhow::Result<HttpRegistryConfig> {
    let url = r.url.clone().context(
        "config field `registry.url` is required for Avro topics: the schema registry their schemas are in",
    )?;
    let mut c = HttpRegistryConfig::new(url);
    c.api = r.api.map(|api| match api {
        RegistryApi::ApicurioV3 => Api::ApicurioV3,
        RegistryApi::ApicurioV2 => Api::ApicurioV2,
        RegistryApi::Ccompat => Api::Ccompat,
    });
    c.timeout = Duration::from_millis(r.timeout_ms);
    c.auth = match (&r.username, &r.oauth) {
        (Some(username), _) => Auth::Basic {
            username: username.clone(),
            password: r
                .password
                .as_ref()
                .map(|p| p.expose().to_owned())
                .unwrap_or_default(),
        },
        (None, Some(o)) => Auth::ClientCredentials {
            token_url: o.token_url.clone(),
            client_id: o.client_id.clone(),
            client_secret: o.client_secret.expose().to_owned(),
            scope: o.scope.clone(),
        },
        (None, None) => Auth::None,
    };
    if let Some(path) = &r.ca_file {
        c.ca_pem = Some(
            std::fs::read(path)
                .with_context(|| format!("reading registry.ca-file {}", path.display()))?,
        );
    }
    Ok(c)
}
