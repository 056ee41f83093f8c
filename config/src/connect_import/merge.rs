//! Several connectors' sections merged into one config, and that config as TOML.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use toml::Value;

use super::cfg::{Connector, Kind, Section, Topics};
use super::{Dropped, ImportError, Options};

/// All connectors, as one config.
pub(crate) struct Merged {
    brokers: String,
    topics: Topics,
    format: Option<&'static str>,
    registry: Section,
    oauth: Section,
    raw: Option<(Section, Section, Section)>,
    replica: Option<Section>,
    lake: Option<Lake>,
    errors: Section,
    columns: Vec<Section>,
    pub(crate) dropped: Vec<Dropped>,
    pub(crate) notes: Vec<String>,
    pub(crate) sources: Vec<(String, String, String)>,
}

/// `[lake]` and its tables: catalog properties, store, store options.
struct Lake {
    lake: Section,
    properties: Section,
    store: Section,
    options: Section,
}

/// Which connector (by index) set what, for naming both sides of a conflict.
#[derive(Default)]
struct Owners {
    format: Option<(&'static str, usize)>,
    keys: BTreeMap<String, usize>,
    raw: Option<usize>,
    replica: Option<usize>,
    lake: Option<usize>,
}

fn conflict(what: &str, a: &Connector, av: String, b: &Connector, bv: String) -> ImportError {
    ImportError::Conflict(format!(
        "{} and {} disagree on {what}: {av} in {}, {bv} in {}; one lakesink config reads one set of topics with one format: import them into separate configs",
        a.file, b.file, a.file, b.file
    ))
}

fn describe(t: &Topics) -> String {
    match t {
        Topics::List(l) => format!("topics {}", l.join(",")),
        Topics::Regex(r) => format!("topics.regex {r}"),
    }
}

/// Topics compared as sets.
fn norm(t: &Topics) -> Topics {
    match t {
        Topics::List(l) => {
            let mut l = l.clone();
            l.sort();
            l.dedup();
            Topics::List(l)
        }
        r => r.clone(),
    }
}

pub(crate) fn merge(parts: Vec<Connector>, options: &Options) -> Result<Merged, ImportError> {
    let first = &parts[0];
    let mut merged = Merged {
        brokers: String::new(),
        topics: first.topics.clone(),
        format: None,
        registry: Section::default(),
        oauth: Section::default(),
        raw: None,
        replica: None,
        lake: None,
        errors: Section::default(),
        columns: first.columns.clone(),
        dropped: Vec::new(),
        notes: Vec::new(),
        sources: Vec::new(),
    };
    let mut owners = Owners::default();
    for (i, p) in parts.iter().enumerate() {
        if norm(&p.topics) != norm(&first.topics) {
            return Err(conflict(
                "the topics",
                first,
                describe(&first.topics),
                p,
                describe(&p.topics),
            ));
        }
        if let Some(f) = p.format {
            match owners.format {
                Some((g, j)) if g != f => {
                    return Err(conflict(
                        "the format (value.converter)",
                        &parts[j],
                        g.into(),
                        p,
                        f.into(),
                    ));
                }
                None => owners.format = Some((f, i)),
                _ => {}
            }
        }
        if p.columns != first.columns {
            return Err(ImportError::Conflict(format!(
                "{} and {} transform the columns differently (ReplaceField); lakesink applies one set of column policies to every sink, so the raw layer and the replica hold the same columns: import them into separate configs, or make the transforms equal",
                first.file, p.file
            )));
        }
        merged.add_sections(&parts, i, &mut owners.keys)?;
        merged.add_sink(&parts, i, &mut owners)?;
        merged.dropped.extend(p.dropped.iter().cloned());
        merged.notes.extend(p.notes.iter().cloned());
        merged
            .sources
            .push((p.file.clone(), p.name.clone(), p.class.clone()));
    }
    merged.brokers = brokers(&parts, options, &mut merged.notes);
    merged.format = owners.format.map(|(f, _)| f);
    if merged.format == Some("avro") && merged.registry.get("url").is_none() {
        merged.notes.push(
            "registry.url: the converters name no registry URL; set it (LAKESINK__REGISTRY__URL)"
                .into(),
        );
        merged.registry.set("url", "http://localhost:8080");
    }
    Ok(merged)
}

/// `kafka.brokers`: the option, else the brokers a connector names (its license topic's or
/// control topic's), else a placeholder; each but the option with a note.
fn brokers(parts: &[Connector], options: &Options, notes: &mut Vec<String>) -> String {
    match options
        .brokers
        .clone()
        .map(|b| (b, "--brokers"))
        .or_else(|| parts.iter().find_map(|p| p.brokers.clone()))
    {
        Some((b, key)) => {
            if options.brokers.is_none() {
                notes.push(format!(
                    "kafka.brokers is {key}: check that it names the cluster the topics are in"
                ));
            }
            b
        }
        None => {
            notes.push(
                "kafka.brokers: connector configs do not name the brokers (the Connect worker's config does); set it, pass --brokers, or set LAKESINK__KAFKA__BROKERS".into(),
            );
            "localhost:9092".into()
        }
    }
}

impl Merged {
    /// The shared sections of `parts[i]`: a key set by two connectors must agree.
    fn add_sections(
        &mut self,
        parts: &[Connector],
        i: usize,
        owner: &mut BTreeMap<String, usize>,
    ) -> Result<(), ImportError> {
        let p = &parts[i];
        for (section, name, target) in [
            (&p.registry, "registry", &mut self.registry),
            (&p.oauth, "registry.oauth", &mut self.oauth),
            (&p.errors, "errors", &mut self.errors),
        ] {
            for (k, v) in &section.0 {
                let full = format!("{name}.{k}");
                match target.get(k) {
                    Some(w) if w != v => {
                        let j = owner[&full];
                        return Err(conflict(&full, &parts[j], w.to_string(), p, v.to_string()));
                    }
                    Some(_) => {}
                    None => {
                        target.set(k, v.clone());
                        owner.insert(full, i);
                    }
                }
            }
        }
        Ok(())
    }

    /// The `[raw]`, `[replica]` or `[lake]` section of `parts[i]`: one of each at most.
    fn add_sink(
        &mut self,
        parts: &[Connector],
        i: usize,
        owners: &mut Owners,
    ) -> Result<(), ImportError> {
        let p = &parts[i];
        let (owner, what, section) = match p.kind {
            Kind::S3 => (&mut owners.raw, "S3 sinks", "[raw]"),
            Kind::ConfluentJdbc | Kind::DebeziumJdbc => {
                (&mut owners.replica, "JDBC sinks", "[replica]")
            }
            Kind::Iceberg => (&mut owners.lake, "Iceberg sinks", "[lake]"),
        };
        if let Some(j) = *owner {
            return Err(ImportError::Conflict(format!(
                "{} and {} are both {what}: a lakesink config has one {section} section; import them into separate configs",
                parts[j].file, p.file
            )));
        }
        *owner = Some(i);
        match p.kind {
            Kind::S3 => {
                self.raw = Some((p.raw.clone(), p.store.clone(), p.store_options.clone()));
            }
            Kind::ConfluentJdbc | Kind::DebeziumJdbc => self.replica = Some(p.replica.clone()),
            Kind::Iceberg => {
                self.lake = Some(Lake {
                    lake: p.lake.clone(),
                    properties: p.lake_properties.clone(),
                    store: p.lake_store.clone(),
                    options: p.lake_store_options.clone(),
                });
            }
        }
        Ok(())
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let files: Vec<&str> = self.sources.iter().map(|(f, _, _)| f.as_str()).collect();
        let _ = writeln!(
            out,
            "# Imported by `lakesink import-connect` from {}.",
            files.join(", ")
        );
        out.push_str("\n[kafka]\n");
        let mut kafka = Section::default();
        kafka.set("brokers", self.brokers.clone());
        match &self.topics {
            Topics::List(l) => kafka.set(
                "topics",
                Value::Array(l.iter().cloned().map(Value::String).collect()),
            ),
            Topics::Regex(r) => kafka.set("topics-regex", r.clone()),
        }
        if let Some(f) = self.format
            && f != "avro"
        {
            kafka.set("format", f);
        }
        kafka.render(&mut out);
        if !self.registry.is_empty()
            && self.format != Some("json")
            && self.format != Some("connect-json")
        {
            out.push_str("\n[registry]\n");
            self.registry.render(&mut out);
            if !self.oauth.is_empty() {
                out.push_str("\n[registry.oauth]\n");
                self.oauth.render(&mut out);
            }
        }
        if let Some((raw, store, options)) = &self.raw {
            out.push_str("\n[raw]\n");
            raw.render(&mut out);
            if !store.is_empty() {
                out.push_str("\n[raw.store]\n");
                store.render(&mut out);
            }
            if !options.is_empty() {
                out.push_str("\n[raw.store.options]\n");
                options.render(&mut out);
            }
        }
        if let Some(replica) = &self.replica {
            out.push_str("\n[replica]\n");
            replica.render(&mut out);
        }
        if let Some(lake) = &self.lake {
            out.push_str("\n[lake]\n");
            lake.lake.render(&mut out);
            for (name, section) in [
                ("lake.catalog-properties", &lake.properties),
                ("lake.store", &lake.store),
                ("lake.store.options", &lake.options),
            ] {
                if !section.is_empty() {
                    let _ = writeln!(out, "\n[{name}]");
                    section.render(&mut out);
                }
            }
        }
        if !self.errors.is_empty() {
            out.push_str("\n[errors]\n");
            self.errors.render(&mut out);
        }
        for policy in &self.columns {
            out.push_str("\n[[columns]]\n");
            policy.render(&mut out);
        }
        out
    }
}
