//! Any payload with any header values: unframe returns a split or a typed error, never panics,
//! and a split's datum is a suffix of the payload.
#![no_main]

use lakesink_schema_registry::{IdKind, Side, unframe};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte picks the headers present; the next 8 are their value; the rest is the payload.
    let (flags, rest) = data.split_first().unwrap_or((&0, &[]));
    let (header, payload) = rest.split_at(rest.len().min(8));
    let names = [
        "apicurio.value.globalId",
        "apicurio.value.contentId",
        "apicurio.value.encoding",
        "apicurio.value.artifactId",
    ];
    let lookup = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .filter(|i| flags & (1 << i) != 0)
            .map(|_| header)
    };
    for kind in [IdKind::ContentId, IdKind::GlobalId] {
        if let Ok(f) = unframe(Side::Value, payload, lookup, kind) {
            assert!(payload.ends_with(f.datum));
        }
    }
});
