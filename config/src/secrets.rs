//! Secrets by reference: a secret key's value may be `env:NAME` (the variable's value),
//! `file:/path` (the file's content, one trailing newline removed) or `literal:TEXT` (TEXT as
//! is, for a value that itself starts with `env:`, `file:` or `literal:`), or
//! `aws-secretsmanager:NAME[#KEY]` (AWS Secrets Manager, fetched by the service right after
//! loading). Anything else is the value itself. References are resolved once, at load time;
//! errors name the key and the reference, never a value.

use std::collections::HashMap;

use crate::ConfigError;

/// What a secret's text refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef<'a> {
    Env(&'a str),
    File(&'a str),
    Literal(&'a str),
    /// `aws-secretsmanager:NAME` (the secret's string) or `aws-secretsmanager:NAME#KEY` (a
    /// key of the JSON object it holds), fetched by the service after loading.
    AwsSecretsManager(&'a str),
}

impl<'a> SecretRef<'a> {
    pub fn parse(text: &'a str) -> Self {
        if let Some(name) = text.strip_prefix("env:") {
            SecretRef::Env(name)
        } else if let Some(path) = text.strip_prefix("file:") {
            SecretRef::File(path)
        } else if let Some(rest) = text.strip_prefix(AWS_SECRETS_MANAGER) {
            SecretRef::AwsSecretsManager(rest)
        } else if let Some(rest) = text.strip_prefix("literal:") {
            SecretRef::Literal(rest)
        } else {
            SecretRef::Literal(text)
        }
    }

    /// Whether the text is a reference (and so safe to print).
    pub fn is_reference(text: &str) -> bool {
        matches!(
            SecretRef::parse(text),
            SecretRef::Env(_) | SecretRef::File(_) | SecretRef::AwsSecretsManager(_)
        )
    }
}

pub const AWS_SECRETS_MANAGER: &str = "aws-secretsmanager:";

/// Resolves `text` for `key`; `env` is the environment the config was loaded with.
pub(crate) fn resolve(
    key: &str,
    text: &str,
    env: &HashMap<String, String>,
) -> Result<String, ConfigError> {
    let fail = |reason: String| ConfigError::Secret {
        key: key.to_owned(),
        reference: text.to_owned(),
        reason,
    };
    match SecretRef::parse(text) {
        SecretRef::Literal(v) => Ok(v.to_owned()),
        SecretRef::AwsSecretsManager(name) => {
            if name.is_empty() || name.starts_with('#') {
                return Err(fail(format!(
                    "no secret name after `{AWS_SECRETS_MANAGER}` ({AWS_SECRETS_MANAGER}NAME or {AWS_SECRETS_MANAGER}NAME#KEY)"
                )));
            }
            // Fetched from AWS by the service once loaded: left as written.
            Ok(text.to_owned())
        }
        SecretRef::Env(name) => {
            if name.is_empty() {
                return Err(fail("no variable name after `env:`".into()));
            }
            env.get(name)
                .cloned()
                .ok_or_else(|| fail(format!("the environment variable {name} is not set")))
        }
        SecretRef::File(path) => {
            if path.is_empty() {
                return Err(fail("no path after `file:`".into()));
            }
            // The error is the io error's kind only: its text never holds the content.
            let mut content = std::fs::read_to_string(path)
                .map_err(|e| fail(format!("cannot read {path}: {}", e.kind())))?;
            if content.ends_with('\n') {
                content.pop();
                if content.ends_with('\r') {
                    content.pop();
                }
            }
            Ok(content)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn forms() {
        let e = env(&[("PW", "hunter2")]);
        assert_eq!(resolve("k", "plain", &e).unwrap(), "plain");
        assert_eq!(resolve("k", "env:PW", &e).unwrap(), "hunter2");
        assert_eq!(resolve("k", "literal:env:PW", &e).unwrap(), "env:PW");
        assert_eq!(resolve("k", "literal:x", &e).unwrap(), "x");
        let dir = std::env::temp_dir().join(format!("lakesink-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pw");
        std::fs::write(&f, "s3cret\r\n").unwrap();
        let r = format!("file:{}", f.display());
        assert_eq!(resolve("k", &r, &e).unwrap(), "s3cret");
        std::fs::write(&f, "two\nlines\n\n").unwrap();
        assert_eq!(resolve("k", &r, &e).unwrap(), "two\nlines\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_key_and_reference_never_a_value() {
        let e = env(&[("OTHER", "hunter2")]);
        let err = resolve("replica.password", "env:MISSING", &e).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("replica.password"), "{text}");
        assert!(text.contains("env:MISSING"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        let err = resolve("registry.password", "file:/nonexistent/pw", &e).unwrap_err();
        assert!(err.to_string().contains("file:/nonexistent/pw"), "{err}");
        assert!(resolve("k", "env:", &e).is_err());
    }
}
