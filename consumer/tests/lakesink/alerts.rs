//! E-mail alerts against a real SMTP server: aiosmtpd (PyPI) on loopback with STARTTLS and
//! AUTH required and the stack's throwaway certificate, as a mail provider's submission port
//! is. The run stops at a bad record; the operator gets an e-mail saying which group and sink
//! failed and with what error.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lakesink_tests::secure::SecureStack;
use lakesink_tests::{Stack, eventually};
use serde_json::Value;

use crate::common::{Run, bad_record_topic};

/// The SMTP server, killed when dropped; `messages` are what it received.
struct Smtp {
    child: Child,
    port: u16,
    messages: Arc<Mutex<Vec<Value>>>,
}

impl Smtp {
    fn start(stack: &Stack, tls_dir: &std::path::Path, user: &str, password: &str) -> Self {
        let script = lakesink_tests::workspace_root().join("tests/python/smtp_server.py");
        let mut child = Command::new(&stack.python)
            .arg(script)
            .arg(tls_dir.join("server-cert.pem"))
            .arg(tls_dir.join("server-key.pem"))
            .args([user, password])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{}: {e}: run `dev/stack install` (aiosmtpd)", stack.python)
            });
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let port = first
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the SMTP server did not start: {first:?}"));
        let messages = Arc::new(Mutex::new(Vec::new()));
        let store = messages.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let (Ok(v), Ok(mut m)) = (serde_json::from_str(&line), store.lock()) {
                    m.push(v);
                }
            }
        });
        Self {
            child,
            port,
            messages,
        }
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_sends_an_email_over_starttls_with_auth() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let tls_dir = k.ca_file.parent().expect("the CA's directory");
    let smtp = Smtp::start(&stack, tls_dir, "lakesink-alerts", "smtp-secret");

    let topic = bad_record_topic(&stack, "alert-mail", b"{\"not\": \"avro\"}").await;

    let email = format!(
        "[alerts.email]\nsmtp-host = \"127.0.0.1\"\nsmtp-port = {}\ntls = \"starttls\"\n\
         ca-file = \"{}\"\nusername = \"lakesink-alerts\"\npassword = \"env:SMTP_PASSWORD\"\n\
         from = \"lakesink <lakesink@example.com>\"\nto = [\"oncall@example.com\", \"dba@example.com\"]\n",
        smtp.port,
        k.ca_file.display()
    );
    let run = Run::with(stack, &topic, 1, Some("flush-size = 5"), &email);

    // `check` logs in as a send would, and sends nothing.
    let check = |password: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_lakesink"))
            .args(["check", "--config"])
            .arg(&run.config)
            .env("SMTP_PASSWORD", password)
            .env("RUST_LOG", "warn")
            .output()
            .expect("check runs");
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        report
            .lines()
            .find(|l| l[4..].trim_start().starts_with("alerts email"))
            .unwrap_or_else(|| panic!("no alerts email line:\n{report}"))
            .to_owned()
    };
    let good = check("smtp-secret");
    assert!(good.starts_with("OK"), "{good}");
    assert!(good.contains("TLS and login accepted"), "{good}");
    let bad = check("not-the-secret");
    assert!(bad.starts_with("FAIL"), "{bad}");
    assert!(bad.contains("check alerts.email"), "{bad}");
    assert!(!bad.contains("not-the-secret"), "{bad}");
    assert!(
        smtp.messages.lock().expect("messages").is_empty(),
        "check sends nothing"
    );

    let mut child = run.start_with(None, &[("SMTP_PASSWORD", "smtp-secret")]);
    let stopped = run.stopped(&mut child, Duration::from_secs(60));
    assert!(
        stopped.contains(&format!("{topic}[0] offset 0")),
        "{stopped}"
    );

    let mail = eventually(Duration::from_secs(10), || async {
        smtp.messages.lock().ok()?.first().cloned()
    })
    .await
    .unwrap_or_else(|| panic!("no e-mail; log:\n{}", run.log_tail()));
    assert_eq!(mail["auth"], "lakesink-alerts", "{mail}");
    assert_eq!(mail["tls"], true, "{mail}");
    assert_eq!(mail["from"], "lakesink@example.com", "{mail}");
    assert_eq!(
        mail["to"],
        serde_json::json!(["oncall@example.com", "dba@example.com"])
    );
    let subject = mail["subject"].as_str().unwrap_or_default();
    assert!(
        subject.starts_with(&format!("lakesink ({}): sink ", run.group))
            && subject.contains(" failed: data: "),
        "{subject}"
    );
    let text = mail["text"].as_str().unwrap_or_default();
    for part in [
        format!("group: {}", run.group),
        "state: failed".to_owned(),
        "component: data".to_owned(),
        format!("{topic}[0] offset 0"),
        "it looks like JSON".to_owned(),
    ] {
        assert!(text.contains(&part), "{part:?} not in the e-mail:\n{text}");
    }
    assert!(
        !run.log_tail().contains("smtp-secret"),
        "{}",
        run.log_tail()
    );
}
