//! Duplicate keys in a JSON text. serde_json, like Go's `encoding/json`, keeps the last of
//! two equal keys of a map; the capacity rule ([`crate::validate`]) refuses such a value
//! instead, since `{"cpu":"1","cpu":"-64"}` must not mean whichever came last.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The path of the first key that appears twice in one JSON object of `text` (e.g.
/// `resources.cpu`, `zones[1].name`), or `None` when there is none. Text that is not JSON
/// has none: its parser reports it.
pub fn first_duplicate(text: &str) -> Option<String> {
    let mut path = Vec::new();
    let mut found = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let walk = Walk {
        path: &mut path,
        found: &mut found,
    };
    // A parse error ends the walk; what was found before it still counts.
    let _ = walk.deserialize(&mut de);
    found
}

fn render(path: &[String], last: &str) -> String {
    let mut s = String::new();
    for part in path.iter().map(String::as_str).chain(std::iter::once(last)) {
        if !s.is_empty() && !part.starts_with('[') {
            s.push('.');
        }
        s.push_str(part);
    }
    s
}

struct Walk<'a> {
    path: &'a mut Vec<String>,
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            self.path.push(format!("[{i}]"));
            let more = seq.next_element_seed(Walk {
                path: &mut *self.path,
                found: &mut *self.found,
            })?;
            self.path.pop();
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.found.is_none() && seen.contains(&key) {
                *self.found = Some(render(self.path, &key));
            }
            self.path.push(key.clone());
            map.next_value_seed(Walk {
                path: &mut *self.path,
                found: &mut *self.found,
            })?;
            self.path.pop();
            seen.insert(key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::first_duplicate;

    #[test]
    fn finds_the_first_repeated_key_with_its_path() {
        assert_eq!(first_duplicate(r#"{"a":1,"b":2}"#), None);
        assert_eq!(
            first_duplicate(r#"{"resources":{"cpu":"1","cpu":"-64"}}"#).as_deref(),
            Some("resources.cpu")
        );
        assert_eq!(
            first_duplicate(r#"{"zones":[{"n":1},{"n":1,"n":2}]}"#).as_deref(),
            Some("zones[1].n")
        );
        assert_eq!(first_duplicate(r#"{"a":1,"a":1}"#).as_deref(), Some("a"));
        // Equal keys in different objects are not duplicates.
        assert_eq!(first_duplicate(r#"{"x":{"a":1},"y":{"a":1}}"#), None);
        assert_eq!(first_duplicate("not json"), None);
    }
}
