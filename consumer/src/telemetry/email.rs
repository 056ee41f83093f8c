//! E-mail alerts over SMTP (lettre): STARTTLS or TLS that must succeed (or none, for a relay
//! on the same host), AUTH when a username is set, the server's certificate checked against
//! the system's roots and `ca-file`. The subject says which group, sink and component; the
//! body has the error in full.

use std::time::Duration;

use lakesink_config::{EmailConfig, SmtpTls};
use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

pub(crate) struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Vec<Mailbox>,
    /// `host:port`, for errors.
    server: String,
}

impl Mailer {
    pub(crate) fn new(c: &EmailConfig, timeout: Duration) -> anyhow::Result<Self> {
        let mailbox = |a: &str, key: &str| {
            a.parse::<Mailbox>()
                .map_err(|e| anyhow::anyhow!("alerts.email.{key}: `{a}` is not an address: {e}"))
        };
        let from = mailbox(&c.from, "from")?;
        let to =
            c.to.iter()
                .map(|a| mailbox(a, "to"))
                .collect::<anyhow::Result<Vec<_>>>()?;
        let mut params = TlsParameters::builder(c.smtp_host.clone());
        if let Some(ca) = &c.ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                anyhow::anyhow!("alerts.email.ca-file: cannot read {}: {e}", ca.display())
            })?;
            params = params.add_root_certificate(
                Certificate::from_pem(&pem)
                    .map_err(|e| anyhow::anyhow!("alerts.email.ca-file {}: {e}", ca.display()))?,
            );
        }
        let params = params
            .build_rustls()
            .map_err(|e| anyhow::anyhow!("alerts.email: TLS settings: {e}"))?;
        let tls = match c.tls {
            SmtpTls::Starttls => Tls::Required(params),
            SmtpTls::Tls => Tls::Wrapper(params),
            SmtpTls::None => Tls::None,
        };
        // `builder_dangerous` only means "the TLS is set here, not by the builder".
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&c.smtp_host)
            .port(c.port())
            .tls(tls)
            .timeout(Some(timeout));
        if let (Some(user), Some(password)) = (&c.username, &c.password) {
            builder =
                builder.credentials(Credentials::new(user.clone(), password.expose().to_owned()));
        }
        Ok(Self {
            transport: builder.build(),
            from,
            to,
            server: format!("{}:{}", c.smtp_host, c.port()),
        })
    }

    /// Connects, secures and authenticates as a send would, and sends nothing: for `check`.
    pub(crate) async fn test(&self) -> Result<String, String> {
        match self.transport.test_connection().await {
            Ok(true) => Ok(format!(
                "{}: connected, TLS and login accepted; alerts go to {}",
                self.server,
                self.to
                    .iter()
                    .map(|m| m.email.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Ok(false) => Err(format!("{}: the server did not answer NOOP", self.server)),
            Err(e) => Err(format!(
                "{}: {}: check alerts.email (smtp-host, smtp-port, tls, username, password)",
                self.server,
                lakesink_model::with_causes(&e)
            )),
        }
    }

    /// Sends one message to every recipient; the error says what the server answered.
    pub(crate) async fn send(&self, subject: &str, body: String) -> Result<(), String> {
        let mut message = Message::builder()
            .from(self.from.clone())
            .subject(subject)
            .header(ContentType::TEXT_PLAIN);
        for to in &self.to {
            message = message.to(to.clone());
        }
        let message = message.body(body).map_err(|e| e.to_string())?;
        self.transport.send(message).await.map(drop).map_err(|e| {
            format!(
                "SMTP server {} (alerts.email): {}",
                self.server,
                lakesink_model::with_causes(&e)
            )
        })
    }
}
