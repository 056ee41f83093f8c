//! Records on Debezium topics that are not table rows, and what to do with each kind.
//!
//! They are recognised by the value schema's name, as Debezium's own `SchemaFactory` does,
//! not by topic name: topic names are configurable. Signals are the exception: users write
//! them as plain JSON, so they are recognised by their content, and only where the record
//! could not be decoded otherwise.

use serde_json::Value;

/// Records on a Debezium topic that are not table rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NonData {
    /// `io.debezium.connector.common.Heartbeat`.
    Heartbeat,
    /// `…SchemaChangeValue`: the schema-change topic (MySQL, SQL Server, Db2, Oracle).
    SchemaChange,
    /// `…TransactionMetadataValue`: the transaction topic.
    TransactionMetadata,
    /// `…MessageValue`: PostgreSQL logical decoding messages.
    Message,
    /// `io.debezium.connector.common.Notification`: the notification sink topic.
    Notification,
    /// `{"type": …, "data": …}` in plain JSON: the Kafka signal channel.
    Signal,
}

impl NonData {
    pub const ALL: [NonData; 6] = [
        NonData::Heartbeat,
        NonData::SchemaChange,
        NonData::TransactionMetadata,
        NonData::Message,
        NonData::Notification,
        NonData::Signal,
    ];

    /// The kind's name in configuration, metrics and files.
    pub fn as_str(self) -> &'static str {
        match self {
            NonData::Heartbeat => "heartbeat",
            NonData::SchemaChange => "schema-change",
            NonData::TransactionMetadata => "transaction",
            NonData::Message => "message",
            NonData::Notification => "notification",
            NonData::Signal => "signal",
        }
    }

    /// The kind named `name` (as [`Self::as_str`] gives it).
    pub fn from_name(name: &str) -> Option<NonData> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The kind a value schema's record name (`connect.name`) marks, if any.
    pub(crate) fn of_record_name(name: &str) -> Option<NonData> {
        match name.rsplit('.').next().unwrap_or(name) {
            "Heartbeat" => Some(NonData::Heartbeat),
            "SchemaChangeValue" => Some(NonData::SchemaChange),
            "TransactionMetadataValue" => Some(NonData::TransactionMetadata),
            "MessageValue" => Some(NonData::Message),
            "Notification" if name.starts_with("io.debezium.") => Some(NonData::Notification),
            _ => None,
        }
    }

    /// The kind a key schema's record name marks, if any: tombstones have only a key.
    pub(crate) fn of_key_record_name(name: &str) -> Option<NonData> {
        let debezium = name.starts_with("io.debezium.");
        match name.rsplit('.').next().unwrap_or(name) {
            "ServerNameKey" if debezium => Some(NonData::Heartbeat),
            "SchemaChangeKey" if debezium => Some(NonData::SchemaChange),
            "TransactionMetadataKey" if debezium => Some(NonData::TransactionMetadata),
            "MessageKey" if debezium => Some(NonData::Message),
            _ => None,
        }
    }
}

impl std::fmt::Display for NonData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to one kind of non-data record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Route {
    /// Counted and logged, nothing else.
    #[default]
    Skip,
    /// Decoded into batches of shape [`crate::ValueShape::NonData`], the whole value as one
    /// `value` column: the raw layer keeps them, the replica ignores them.
    Keep,
    /// A decoding error naming the record: the service stops, or dead-letters it.
    Refuse,
}

/// A route per kind; every kind is skipped by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Routes([Route; NonData::ALL.len()]);

impl Routes {
    pub fn set(&mut self, kind: NonData, route: Route) -> &mut Self {
        self.0[kind as usize] = route;
        self
    }

    pub fn get(&self, kind: NonData) -> Route {
        self.0[kind as usize]
    }
}

/// Field metadata on a non-data batch's `value` column naming the kind, so the raw layer's
/// files say what they hold (replay refuses them).
pub const NON_DATA_METADATA: &str = "lakesink.non-data";

/// Whether `value` is a signal for Debezium's Kafka signal channel: a JSON object with a
/// string `type` and a `data` member (and maybe an `id`), nothing else.
pub(crate) fn is_signal(value: Option<&[u8]>) -> bool {
    let Some(bytes) = value else {
        return false;
    };
    if bytes
        .first()
        .is_none_or(|b| !b.is_ascii_whitespace() && *b != b'{')
    {
        return false;
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(o)) => {
            o.get("type").is_some_and(Value::is_string)
                && o.contains_key("data")
                && o.keys()
                    .all(|k| matches!(k.as_str(), "type" | "data" | "id"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_told_from_other_json() {
        assert!(is_signal(Some(
            br#"{"type":"execute-snapshot","data":{"data-collections":["public.t"]}}"#
        )));
        assert!(is_signal(Some(
            br#" {"id":"x","type":"stop-snapshot","data":null}"#
        )));
        // A Connect JSON record, a row with more columns, no type, framed Avro, garbage.
        assert!(!is_signal(Some(br#"{"schema":{},"payload":{}}"#)));
        assert!(!is_signal(Some(br#"{"type":"a","data":1,"other":2}"#)));
        assert!(!is_signal(Some(br#"{"data":1}"#)));
        assert!(!is_signal(Some(br#"{"type":3,"data":1}"#)));
        assert!(!is_signal(Some(&[0, 0, 0, 0, 1, 2])));
        assert!(!is_signal(Some(b"{not json")));
        assert!(!is_signal(None));
    }

    #[test]
    fn kinds_come_from_record_names() {
        let of = NonData::of_record_name;
        assert_eq!(
            of("io.debezium.connector.common.Heartbeat"),
            Some(NonData::Heartbeat)
        );
        assert_eq!(
            of("io.debezium.connector.mysql.SchemaChangeValue"),
            Some(NonData::SchemaChange)
        );
        assert_eq!(
            of("io.debezium.connector.common.TransactionMetadataValue"),
            Some(NonData::TransactionMetadata)
        );
        assert_eq!(
            of("io.debezium.connector.postgresql.MessageValue"),
            Some(NonData::Message)
        );
        assert_eq!(
            of("io.debezium.connector.common.Notification"),
            Some(NonData::Notification)
        );
        assert_eq!(
            NonData::of_key_record_name("io.debezium.connector.common.ServerNameKey"),
            Some(NonData::Heartbeat)
        );
        assert_eq!(
            NonData::of_key_record_name("io.debezium.connector.mysql.SchemaChangeKey"),
            Some(NonData::SchemaChange)
        );
        assert_eq!(
            NonData::of_key_record_name("demo.public.ServerNameKey"),
            None
        );
        assert_eq!(
            NonData::of_key_record_name("demo.public.customers.Key"),
            None
        );
        // A table named notification is a table.
        assert_eq!(of("demo.public.notification.Value"), None);
        assert_eq!(of("demo.public.Notification"), None);
        assert_eq!(of("demo.public.customers.Envelope"), None);
    }
}
