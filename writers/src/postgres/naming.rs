//! Table names from the `table-name-format` template, and identifier quoting.

use lakesink_config::IdentifierCase;

/// PostgreSQL's identifier limit (NAMEDATALEN - 1); longer names are refused, not truncated.
pub(crate) const MAX_IDENT: usize = 63;

/// A schema-qualified table name, unquoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    pub schema: String,
    pub table: String,
}

impl TableName {
    /// `"schema"."table"`, ready to splice into SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.table)
    }
}

/// A double-quoted identifier; inner quotes doubled, so any text is safe.
pub fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Checks that PostgreSQL can hold `name` as an identifier without changing it.
pub(crate) fn check_ident(name: &str, what: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} name is empty"));
    }
    if name.len() > MAX_IDENT {
        return Err(format!(
            "{what} name `{name}` is {} bytes; PostgreSQL holds at most {MAX_IDENT} (it is not truncated)",
            name.len()
        ));
    }
    if name.contains('\0') {
        return Err(format!("{what} name `{name}` contains a NUL byte"));
    }
    Ok(())
}

/// Java's `Matcher.replaceFirst` replacement (`$1`, `\$`) in the regex crate's syntax
/// (`${1}`, `$$`), for a regex of `groups` groups: as in Java, the digits after `$` are one
/// group number as long as it stays a group (`$12` with one group is group 1, then `2`); the
/// regex crate would read `$1a` as a group named `1a`.
fn java_replacement(java: &str, groups: usize) -> Result<String, usize> {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut group: Option<usize> = None;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    let next = group.map_or(d as usize, |g| g * 10 + d as usize);
                    if group.is_some() && next > groups {
                        break;
                    }
                    group = Some(next);
                    chars.next();
                }
                match group {
                    // Java refuses a group the regex lacks, at the first topic it renames.
                    Some(g) if g > groups => return Err(g),
                    Some(g) => out.push_str(&format!("${{{g}}}")),
                    None => out.push_str("$$"),
                }
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The values a template can refer to.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NameSource<'a> {
    pub topic: &'a str,
    pub db: Option<&'a str>,
    pub schema: Option<&'a str>,
    pub table: Option<&'a str>,
}

/// A parsed `table-name-format`.
#[derive(Debug, Clone)]
pub(crate) struct NameTemplate {
    parts: Vec<Part>,
    dots_to_underscores: bool,
    default_schema: String,
    database: String,
    case: IdentifierCase,
    /// `${topic}` is the topic rewritten: a regex matching the whole name, and its replacement.
    route: Option<(regex::Regex, String)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Topic,
    SourceDb,
    SourceSchema,
    SourceTable,
}

impl NameTemplate {
    /// `database` is the connected database: a three-part name must start with it.
    pub(crate) fn parse(
        format: &str,
        dots_to_underscores: bool,
        default_schema: &str,
        database: &str,
    ) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = format;
        while let Some(start) = rest.find("${") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_owned()));
            }
            let end = rest[start..]
                .find('}')
                .ok_or_else(|| format!("table-name-format `{format}`: unclosed `${{`"))?;
            let var = &rest[start + 2..start + end];
            parts.push(match var {
                "topic" => Part::Topic,
                "source.db" => Part::SourceDb,
                "source.schema" => Part::SourceSchema,
                "source.table" => Part::SourceTable,
                other => {
                    return Err(format!(
                        "table-name-format `{format}`: unknown variable `${{{other}}}` (use topic, source.db, source.schema, source.table)"
                    ));
                }
            });
            rest = &rest[start + end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Self {
            parts,
            dots_to_underscores,
            default_schema: default_schema.to_owned(),
            database: database.to_owned(),
            case: IdentifierCase::Preserve,
            route: None,
        })
    }

    /// The template with `${topic}` rewritten where `regex` matches the whole topic name, as
    /// Kafka Connect's `RegexRouter` does (`$1` in `replacement` is the first group).
    pub(crate) fn with_route(mut self, regex: &str, replacement: &str) -> Result<Self, String> {
        let re = regex::Regex::new(&format!("^(?:{regex})$"))
            .map_err(|e| format!("replica.topic-regex: {e}"))?;
        let groups = re.captures_len() - 1;
        let to = java_replacement(replacement, groups).map_err(|g| {
            format!("replica.topic-replacement refers to group {g}, but topic-regex has {groups}")
        })?;
        self.route = Some((re, to));
        Ok(self)
    }

    /// The template with `suffix` appended to what it renders.
    pub(crate) fn with_suffix(mut self, suffix: &str) -> Self {
        if !suffix.is_empty() {
            self.parts.push(Part::Text(suffix.to_owned()));
        }
        self
    }

    /// The template with names rendered in `case`.
    pub(crate) fn with_case(mut self, case: IdentifierCase) -> Self {
        self.case = case;
        self
    }

    /// Whether the name depends on the `source` block (else it is one per topic).
    pub(crate) fn uses_source(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::SourceDb | Part::SourceSchema | Part::SourceTable))
    }

    /// Renders and splits the name: `table`, `schema.table`, or `database.schema.table`.
    pub(crate) fn render(&self, src: NameSource<'_>) -> Result<TableName, String> {
        let mut out = String::new();
        for part in &self.parts {
            let (value, what) = match part {
                Part::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                Part::Topic => {
                    let topic = match &self.route {
                        Some((re, to)) if re.is_match(src.topic) => {
                            re.replace(src.topic, to.as_str())
                        }
                        _ => std::borrow::Cow::Borrowed(src.topic),
                    };
                    if self.dots_to_underscores {
                        out.push_str(&topic.replace('.', "_"));
                    } else {
                        out.push_str(&topic);
                    }
                    continue;
                }
                Part::SourceDb => (src.db, "source.db"),
                Part::SourceSchema => (src.schema, "source.schema"),
                Part::SourceTable => (src.table, "source.table"),
            };
            let value =
                value.ok_or_else(|| format!("the record has no `{what}` for the table name"))?;
            if self.dots_to_underscores {
                out.push_str(&value.replace('.', "_"));
            } else {
                out.push_str(value);
            }
        }
        let lower = self.case == IdentifierCase::Lower;
        let out = if lower { out.to_ascii_lowercase() } else { out };
        let default_schema = if lower {
            std::borrow::Cow::Owned(self.default_schema.to_ascii_lowercase())
        } else {
            std::borrow::Cow::Borrowed(self.default_schema.as_str())
        };
        let pieces: Vec<&str> = out.split('.').collect();
        let (schema, table) = match pieces.as_slice() {
            [t] => (&*default_schema, *t),
            [s, t] => (*s, *t),
            // Lowered names: the database's name folded alike.
            [d, s, t]
                if *d == self.database || (lower && d.eq_ignore_ascii_case(&self.database)) =>
            {
                (*s, *t)
            }
            [d, _, _] => {
                return Err(format!(
                    "table name `{out}` names database `{d}`, but the replica is `{}`; PostgreSQL cannot write across databases",
                    self.database
                ));
            }
            _ => {
                return Err(format!(
                    "table name `{out}` has {} dot-separated parts; at most 3 (database.schema.table)",
                    pieces.len()
                ));
            }
        };
        check_ident(schema, "schema")?;
        check_ident(table, "table")?;
        Ok(TableName {
            schema: schema.to_owned(),
            table: table.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(topic: &str) -> NameSource<'_> {
        NameSource {
            topic,
            db: Some("source"),
            schema: Some("public"),
            table: Some("Orders"),
        }
    }

    fn name(schema: &str, table: &str) -> TableName {
        TableName {
            schema: schema.into(),
            table: table.into(),
        }
    }

    #[test]
    fn lower_case_folds_ascii_letters_as_postgresql_folds_unquoted_names() {
        let t = NameTemplate::parse("${source.schema}.${source.table}", true, "P", "r")
            .unwrap()
            .with_case(IdentifierCase::Lower);
        let s = NameSource {
            topic: "x",
            db: None,
            schema: Some("DB2INST1"),
            table: Some("ORDERS_Ä"),
        };
        assert_eq!(t.render(s).unwrap(), name("db2inst1", "orders_Ä"));
        let t = NameTemplate::parse("Copy_${topic}", true, "Repl", "r")
            .unwrap()
            .with_case(IdentifierCase::Lower);
        assert_eq!(t.render(src("A.B")).unwrap(), name("repl", "copy_a_b"));
    }

    #[test]
    fn a_topic_route_rewrites_the_whole_topic_as_regex_router_does() {
        let t = NameTemplate::parse("${topic}", false, "public", "r")
            .unwrap()
            .with_route("dbserver1\\.inventory\\.(.*)", "$1_copy")
            .unwrap();
        assert_eq!(
            t.render(src("dbserver1.inventory.orders")).unwrap(),
            name("public", "orders_copy")
        );
        // Not a whole-name match: the topic as it is.
        assert_eq!(
            t.render(src("x.dbserver1.inventory.orders")).unwrap_err(),
            "table name `x.dbserver1.inventory.orders` has 4 dot-separated parts; at most 3 (database.schema.table)"
        );
        assert!(
            NameTemplate::parse("${topic}", true, "p", "r")
                .unwrap()
                .with_route("(", "")
                .is_err()
        );
        assert_eq!(java_replacement("$1a", 1).unwrap(), "${1}a");
        assert_eq!(java_replacement("$12", 1).unwrap(), "${1}2");
        assert_eq!(java_replacement("$12", 12).unwrap(), "${12}");
        assert_eq!(java_replacement("cost\\$1", 1).unwrap(), "cost$$1");
        assert_eq!(java_replacement("$2", 1), Err(2));
    }

    #[test]
    fn topic_dots_become_underscores_like_the_debezium_sink() {
        let t = NameTemplate::parse("${topic}", true, "public", "replica").unwrap();
        assert!(!t.uses_source());
        assert_eq!(
            t.render(src("demo.public.orders")).unwrap(),
            name("public", "demo_public_orders")
        );
    }

    #[test]
    fn dotted_names_split_into_schema_and_table() {
        let t = NameTemplate::parse("${source.schema}.${source.table}", true, "x", "r").unwrap();
        assert!(t.uses_source());
        assert_eq!(t.render(src("a.b.c")).unwrap(), name("public", "Orders"));
        let t = NameTemplate::parse("${topic}", false, "public", "replica").unwrap();
        assert_eq!(
            t.render(src("replica.inventory.orders")).unwrap(),
            name("inventory", "orders")
        );
        let err = t.render(src("other.inventory.orders")).unwrap_err();
        assert!(err.contains("across databases"), "{err}");
        let err = t.render(src("a.b.c.d")).unwrap_err();
        assert!(err.contains("4 dot-separated parts"), "{err}");
        let t = NameTemplate::parse("copy_${source.table}_v2", true, "s", "r").unwrap();
        assert_eq!(t.render(src("t")).unwrap(), name("s", "copy_Orders_v2"));
    }

    #[test]
    fn names_are_never_truncated_and_never_empty() {
        let t = NameTemplate::parse("${topic}", true, "public", "r").unwrap();
        let long = "x".repeat(64);
        let err = t.render(src(&long)).unwrap_err();
        assert!(
            err.contains("64 bytes") && err.contains("not truncated"),
            "{err}"
        );
        assert!(t.render(src(&"x".repeat(63))).is_ok());
        let t = NameTemplate::parse("${source.schema}.", false, "public", "r").unwrap();
        assert!(t.render(src("t")).unwrap_err().contains("empty"));
        assert!(NameTemplate::parse("${nope}", true, "p", "r").is_err());
        assert!(NameTemplate::parse("${topic", true, "p", "r").is_err());
        let none = NameSource {
            topic: "t",
            ..Default::default()
        };
        let t = NameTemplate::parse("${source.table}", true, "p", "r").unwrap();
        assert!(t.render(none).unwrap_err().contains("source.table"));
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote(r#"My "T""#), r#""My ""T""""#);
        assert_eq!(name("a.b", "C").quoted(), r#""a.b"."C""#);
    }
}
