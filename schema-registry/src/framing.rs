//! Where a record names its writer schema, decided per record (a topic can mix formats, for
//! example across a Debezium 3.5 → 3.6 upgrade).
//!
//! In order, as Apicurio's own deserializer checks:
//! 1. headers `apicurio.{key,value}.globalId` / `.contentId`: an 8-byte big-endian id, and the
//!    payload is bare Avro (which often starts with `0x00`, so headers come first);
//! 2. headers `apicurio.{key,value}.groupId` / `.artifactId` / `.version`: coordinates;
//! 3. payload `0x00 | id | datum`, with a 4-byte id, or an 8-byte one when the first four bytes
//!    are zero (Apicurio's optimistic fallback). Whether that id is a contentId or a globalId
//!    cannot be told from the bytes; it is configuration.

use std::borrow::Cow;
use std::fmt;

/// Which half of a Kafka record is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Key,
    Value,
}

impl Side {
    /// `apicurio.{key,value}.<suffix>`, without allocating per record.
    fn header_name(self, suffix: &str) -> Cow<'static, str> {
        const KEY: [&str; 6] = [
            "apicurio.key.encoding",
            "apicurio.key.globalId",
            "apicurio.key.contentId",
            "apicurio.key.artifactId",
            "apicurio.key.groupId",
            "apicurio.key.version",
        ];
        const VALUE: [&str; 6] = [
            "apicurio.value.encoding",
            "apicurio.value.globalId",
            "apicurio.value.contentId",
            "apicurio.value.artifactId",
            "apicurio.value.groupId",
            "apicurio.value.version",
        ];
        let names = match self {
            Side::Key => &KEY,
            Side::Value => &VALUE,
        };
        let i = match suffix {
            "encoding" => 0,
            "globalId" => 1,
            "contentId" => 2,
            "artifactId" => 3,
            "groupId" => 4,
            "version" => 5,
            _ => {
                return Cow::Owned(match self {
                    Side::Key => format!("apicurio.key.{suffix}"),
                    Side::Value => format!("apicurio.value.{suffix}"),
                });
            }
        };
        Cow::Borrowed(names[i])
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Key => "key",
            Side::Value => "value",
        })
    }
}

/// The two id spaces of an Apicurio registry; the Confluent-compatible API serves contentIds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    GlobalId,
    ContentId,
}

/// How a record names its writer schema.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SchemaRef {
    Id {
        kind: IdKind,
        id: i64,
    },
    Coordinates {
        group_id: Option<String>,
        artifact_id: String,
        version: Option<String>,
    },
    /// A schema the record carries itself (JsonConverter with `schemas.enable=true`),
    /// by fingerprint.
    Inline {
        fingerprint: u64,
    },
}

impl fmt::Display for SchemaRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaRef::Id {
                kind: IdKind::GlobalId,
                id,
            } => write!(f, "globalId {id}"),
            SchemaRef::Id {
                kind: IdKind::ContentId,
                id,
            } => write!(f, "contentId {id}"),
            SchemaRef::Coordinates {
                group_id,
                artifact_id,
                version,
            } => write!(
                f,
                "artifact {}/{artifact_id} version {}",
                group_id.as_deref().unwrap_or("default"),
                version.as_deref().unwrap_or("latest")
            ),
            SchemaRef::Inline { fingerprint } => write!(f, "inline schema {fingerprint:016x}"),
        }
    }
}

/// How the datum after the framing is encoded (`apicurio.*.encoding`; payload framing is binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Binary,
    Json,
}

/// A payload split into its schema reference and its datum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed<'a> {
    pub schema: SchemaRef,
    pub encoding: Encoding,
    pub datum: &'a [u8],
    /// The id came from the payload, so its kind is configuration, not the record's word.
    pub id_in_payload: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("{side} is empty: no magic byte and no schema id header")]
    Empty { side: Side },
    #[error(
        "{side} starts with byte {byte:#04x}, not the 0x00 magic byte, and has no schema id header{}",
        if *byte == b'{' || *byte == b'[' {
            "; it looks like JSON: kafka.format = \"connect-json\" reads Kafka Connect's \
             JsonConverter with schemas, \"json\" bare JSON"
        } else {
            ""
        }
    )]
    UnknownMagic { side: Side, byte: u8 },
    #[error("{side} is {len} bytes, too short for its 0x00 magic byte and schema id")]
    Truncated { side: Side, len: usize },
    #[error("header {name} holds {len} bytes; a schema id header holds 8")]
    BadIdHeader { name: String, len: usize },
    #[error("header {name} is not UTF-8")]
    BadTextHeader { name: String },
    #[error("header {name} names encoding {value:?}; expected BINARY or JSON")]
    BadEncoding { name: String, value: String },
    #[error("{side} names schema id {id}; registry ids are positive")]
    NonPositiveId { side: Side, id: i64 },
}

/// Splits one side of a record. `header` returns the last value of a header by name, as
/// Kafka's `lastHeader`; `payload_ids` says how to read ids framed in the payload.
pub fn unframe<'a, 'h>(
    side: Side,
    payload: &'a [u8],
    header: impl Fn(&str) -> Option<&'h [u8]>,
    payload_ids: IdKind,
) -> Result<Framed<'a>, FramingError> {
    let name = |suffix: &str| side.header_name(suffix);
    let encoding = match header(&name("encoding")) {
        None => Encoding::Binary,
        Some(raw) => parse_encoding(&name("encoding"), raw)?,
    };
    for (suffix, kind) in [
        ("globalId", IdKind::GlobalId),
        ("contentId", IdKind::ContentId),
    ] {
        if let Some(raw) = header(&name(suffix)) {
            let bytes: [u8; 8] = raw.try_into().map_err(|_| FramingError::BadIdHeader {
                name: name(suffix).into_owned(),
                len: raw.len(),
            })?;
            let id = positive(side, i64::from_be_bytes(bytes))?;
            return Ok(Framed {
                schema: SchemaRef::Id { kind, id },
                encoding,
                datum: payload,
                id_in_payload: false,
            });
        }
    }
    if let Some(artifact) = header(&name("artifactId")) {
        let text = |suffix: &str, raw: &[u8]| {
            String::from_utf8(raw.to_vec()).map_err(|_| FramingError::BadTextHeader {
                name: name(suffix).into_owned(),
            })
        };
        let optional = |suffix: &str| {
            header(&name(suffix))
                .map(|raw| text(suffix, raw))
                .transpose()
        };
        return Ok(Framed {
            schema: SchemaRef::Coordinates {
                group_id: optional("groupId")?,
                artifact_id: text("artifactId", artifact)?,
                version: optional("version")?,
            },
            encoding,
            datum: payload,
            id_in_payload: false,
        });
    }
    let (id, datum) = payload_id(side, payload)?;
    Ok(Framed {
        schema: SchemaRef::Id {
            kind: payload_ids,
            id: positive(side, id)?,
        },
        encoding: Encoding::Binary,
        datum,
        id_in_payload: true,
    })
}

/// `0x00 | i32 | datum`, or `0x00 | i64 | datum` when the i32 reads 0 and 4 more bytes remain.
fn payload_id(side: Side, payload: &[u8]) -> Result<(i64, &[u8]), FramingError> {
    let (&magic, rest) = payload.split_first().ok_or(FramingError::Empty { side })?;
    if magic != 0 {
        return Err(FramingError::UnknownMagic { side, byte: magic });
    }
    let (short, after_short) = rest
        .split_first_chunk::<4>()
        .ok_or(FramingError::Truncated {
            side,
            len: payload.len(),
        })?;
    let id = i32::from_be_bytes(*short);
    if id == 0
        && let Some((long, after_long)) = rest.split_first_chunk::<8>()
    {
        return Ok((i64::from_be_bytes(*long), after_long));
    }
    Ok((i64::from(id), after_short))
}

fn positive(side: Side, id: i64) -> Result<i64, FramingError> {
    if id > 0 {
        Ok(id)
    } else {
        Err(FramingError::NonPositiveId { side, id })
    }
}

fn parse_encoding(name: &str, raw: &[u8]) -> Result<Encoding, FramingError> {
    match raw {
        b"BINARY" => Ok(Encoding::Binary),
        b"JSON" => Ok(Encoding::Json),
        other => Err(FramingError::BadEncoding {
            name: name.to_owned(),
            value: String::from_utf8_lossy(other).into_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_headers(_: &str) -> Option<&'static [u8]> {
        None
    }

    fn id(kind: IdKind, id: i64) -> SchemaRef {
        SchemaRef::Id { kind, id }
    }

    #[test]
    fn four_byte_payload_id() {
        let f = unframe(
            Side::Value,
            &[0, 0, 0, 0, 13, 2, 4],
            no_headers,
            IdKind::ContentId,
        )
        .unwrap();
        assert_eq!(f.schema, id(IdKind::ContentId, 13));
        assert_eq!(f.datum, &[2, 4]);
        assert_eq!(f.encoding, Encoding::Binary);
        assert!(f.id_in_payload);
    }

    #[test]
    fn eight_byte_payload_id_when_the_first_four_are_zero() {
        let payload = [0, 0, 0, 0, 0, 0, 0, 0, 13, 7];
        let f = unframe(Side::Value, &payload, no_headers, IdKind::GlobalId).unwrap();
        assert_eq!(f.schema, id(IdKind::GlobalId, 13));
        assert_eq!(f.datum, &[7]);
    }

    #[test]
    fn headers_win_over_a_leading_zero_byte() {
        // A bare Debezium datum whose `before` is null starts with 0x00.
        let payload = [0, 2, 6, b'a', b'b', b'c'];
        let ten = 10_i64.to_be_bytes();
        let header = |n: &str| match n {
            "apicurio.value.globalId" => Some(&ten[..]),
            "apicurio.value.encoding" => Some(&b"BINARY"[..]),
            _ => None,
        };
        let f = unframe(Side::Value, &payload, header, IdKind::ContentId).unwrap();
        assert_eq!(f.schema, id(IdKind::GlobalId, 10));
        assert_eq!(f.datum, &payload);
        assert!(!f.id_in_payload);
    }

    #[test]
    fn key_side_reads_key_headers_only() {
        let ten = 10_i64.to_be_bytes();
        let header = |n: &str| (n == "apicurio.value.contentId").then_some(&ten[..]);
        let f = unframe(Side::Key, &[0, 0, 0, 0, 3, 9], header, IdKind::ContentId).unwrap();
        assert_eq!(f.schema, id(IdKind::ContentId, 3));
        let f = unframe(Side::Value, &[9], header, IdKind::GlobalId).unwrap();
        assert_eq!(f.schema, id(IdKind::ContentId, 10));
    }

    #[test]
    fn coordinates_from_headers() {
        let header = |n: &str| match n {
            "apicurio.value.artifactId" => Some(&b"demo.public.t-value"[..]),
            "apicurio.value.version" => Some(&b"2"[..]),
            "apicurio.value.encoding" => Some(&b"JSON"[..]),
            _ => None,
        };
        let f = unframe(Side::Value, b"{}", header, IdKind::ContentId).unwrap();
        assert_eq!(
            f.schema,
            SchemaRef::Coordinates {
                group_id: None,
                artifact_id: "demo.public.t-value".into(),
                version: Some("2".into()),
            }
        );
        assert_eq!(f.encoding, Encoding::Json);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let v = Side::Value;
        let c = IdKind::ContentId;
        assert_eq!(
            unframe(v, &[], no_headers, c),
            Err(FramingError::Empty { side: v })
        );
        assert_eq!(
            unframe(v, &[1, 0, 0, 0, 1], no_headers, c),
            Err(FramingError::UnknownMagic { side: v, byte: 1 })
        );
        let json = unframe(v, br#"{"id": 1}"#, no_headers, c)
            .unwrap_err()
            .to_string();
        assert!(
            json.ends_with("it looks like JSON: kafka.format = \"connect-json\" reads Kafka Connect's JsonConverter with schemas, \"json\" bare JSON"),
            "{json}"
        );
        let other = FramingError::UnknownMagic {
            side: v,
            byte: b'k',
        }
        .to_string();
        assert!(!other.contains("JSON"), "{other}");
        assert_eq!(
            unframe(v, &[0, 0, 1], no_headers, c),
            Err(FramingError::Truncated { side: v, len: 3 })
        );
        assert_eq!(
            unframe(v, &[0, 0, 0, 0, 0], no_headers, c),
            Err(FramingError::NonPositiveId { side: v, id: 0 })
        );
        assert_eq!(
            unframe(v, &[0, 0xff, 0xff, 0xff, 0xff], no_headers, c),
            Err(FramingError::NonPositiveId { side: v, id: -1 })
        );
        let short = |n: &str| (n == "apicurio.value.globalId").then_some(&[1u8, 2][..]);
        assert!(matches!(
            unframe(v, &[], short, c),
            Err(FramingError::BadIdHeader { len: 2, .. })
        ));
        let enc = |n: &str| (n == "apicurio.value.encoding").then_some(&b"XML"[..]);
        assert!(matches!(
            unframe(v, &[0, 0, 0, 0, 1], enc, c),
            Err(FramingError::BadEncoding { .. })
        ));
    }

    #[test]
    fn never_panics_on_any_short_payload() {
        // Every payload up to 10 bytes over a small alphabet: an error or a split, never a panic.
        let alphabet = [0u8, 1, 0x7f, 0xff];
        let mut buf = Vec::new();
        for len in 0..=10u32 {
            for n in 0..alphabet.len().pow(len.min(6)) {
                buf.clear();
                let mut k = n;
                for _ in 0..len {
                    buf.push(alphabet[k % alphabet.len()]);
                    k /= alphabet.len();
                }
                if let Ok(f) = unframe(Side::Value, &buf, no_headers, IdKind::ContentId) {
                    assert!(f.datum.len() < buf.len());
                }
            }
        }
    }
}
