//! The object store a raw layer lives in, from its URL and settings.

use std::sync::Arc;

use lakesink_config::StoreConfig;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

/// The store and the key prefix the URL's path gives. Credentials not in the config come
/// from the usual environment and instance-metadata chains of each cloud.
pub fn open(url: &str, config: &StoreConfig) -> Result<(Arc<dyn ObjectStore>, String), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not a URL (s3://bucket/prefix, file:///dir)"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bad = |e: object_store::Error| format!("object store {url}: {}", super::describe_store(&e));
    let retry = object_store::RetryConfig {
        retry_timeout: std::time::Duration::from_millis(
            config
                .retry_timeout_ms
                .unwrap_or(lakesink_config::DEFAULT_STORE_RETRY_TIMEOUT_MS),
        ),
        ..Default::default()
    };
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" | "s3a" => {
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_allow_http(config.allow_http)
                .with_virtual_hosted_style_request(config.virtual_hosted)
                .with_retry(retry);
            if let Some(e) = &config.endpoint {
                b = b.with_endpoint(e);
            }
            if let Some(r) = &config.region {
                b = b.with_region(r);
            }
            if let Some(k) = &config.access_key_id {
                b = b.with_access_key_id(k);
            }
            if let Some(s) = &config.secret_access_key {
                b = b.with_secret_access_key(s.expose());
            }
            for (k, v) in &config.options {
                b = b.with_config(k.parse().map_err(bad)?, v.expose());
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "gs" => {
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry);
            for (k, v) in &config.options {
                b = b.with_config(k.parse().map_err(bad)?, v.expose());
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "az" | "abfs" | "abfss" => {
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry);
            for (k, v) in &config.options {
                b = b.with_config(k.parse().map_err(bad)?, v.expose());
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "file" => {
            // file:///abs/dir: everything after the scheme is the directory.
            let dir = format!("/{}", rest.trim_start_matches('/'));
            std::fs::create_dir_all(&dir).map_err(|e| format!("creating {dir}: {e}"))?;
            let store = LocalFileSystem::new_with_prefix(&dir).map_err(bad)?;
            return Ok((Arc::new(store), String::new()));
        }
        "memory" => Arc::new(InMemory::new()),
        _ => {
            return Err(format!(
                "{url}: unsupported scheme {scheme:?} (s3, gs, az, abfs, file, memory)"
            ));
        }
    };
    Ok((store, prefix.trim_matches('/').to_owned()))
}
