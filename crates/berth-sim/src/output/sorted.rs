//! Whether an object serializes straight to the bytes its `serde_json::Value` would.
//!
//! The output prints each object as the `Value` tree of it prints: every map's keys in
//! sorted order. Building that tree and dropping it again was half the cost of `-o json`.
//! Most objects need no tree: their structs serialize their fields in sorted order already
//! (k8s-openapi writes them in the order of their names) and their maps are sorted maps.
//! [`in_value_order`] walks an object's serialization without writing anything and says
//! whether every map and struct gives its keys as strings in strictly increasing order and
//! nothing is serialized differently from its `Value` (an `f32`, a 128-bit integer, bytes,
//! enum variants with data, tuples); only then is the object serialized directly.

use std::fmt;

use serde::ser::{self, Impossible, Serialize};

/// Whether `value`'s own serialization prints what its `serde_json::Value` prints, in JSON
/// and in YAML.
pub(super) fn in_value_order<T: Serialize + ?Sized>(value: &T) -> bool {
    value.serialize(Check).is_ok()
}

/// `key` as a map key's text, when it is a string (see [`KeyText`]).
pub(super) fn key_text<T: Serialize + ?Sized>(key: &T) -> Option<String> {
    key.serialize(KeyText).ok()
}

/// The walk found something the `Value` would print otherwise.
#[derive(Debug)]
pub(super) struct Differs;

impl fmt::Display for Differs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not in the Value's order")
    }
}

impl std::error::Error for Differs {}

impl ser::Error for Differs {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Differs
    }
}

/// The serializer that writes nothing and checks.
struct Check;

type R = Result<(), Differs>;

impl ser::Serializer for Check {
    type Ok = ();
    type Error = Differs;
    type SerializeSeq = Seq;
    type SerializeTuple = Impossible<(), Differs>;
    type SerializeTupleStruct = Impossible<(), Differs>;
    type SerializeTupleVariant = Impossible<(), Differs>;
    type SerializeMap = Map;
    type SerializeStruct = Struct;
    type SerializeStructVariant = Impossible<(), Differs>;

    fn serialize_bool(self, _: bool) -> R {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> R {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> R {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> R {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> R {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> R {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> R {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> R {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> R {
        Ok(())
    }
    // A `Value` holds an f32 as an f64, which prints more digits.
    fn serialize_f32(self, _: f32) -> R {
        Err(Differs)
    }
    fn serialize_f64(self, _: f64) -> R {
        Ok(())
    }
    fn serialize_char(self, _: char) -> R {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> R {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> R {
        Err(Differs)
    }
    fn serialize_none(self) -> R {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> R {
        value.serialize(Check)
    }
    fn serialize_unit(self) -> R {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> R {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> R {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> R {
        value.serialize(Check)
    }
    // YAML tags a variant with data; its `Value` is a one-key map.
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> R {
        Err(Differs)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq, Differs> {
        Ok(Seq)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Differs> {
        Err(Differs)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Differs> {
        Err(Differs)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Differs> {
        Err(Differs)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map, Differs> {
        Ok(Map { last: None })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Struct, Differs> {
        Ok(Struct { last: None })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Differs> {
        Err(Differs)
    }
    // 128-bit integers: left to the `Value` (the trait's defaults refuse them too).
}

struct Seq;

impl ser::SerializeSeq for Seq {
    type Ok = ();
    type Error = Differs;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
        value.serialize(Check)
    }
    fn end(self) -> R {
        Ok(())
    }
}

/// A map: each key a string greater than the one before.
struct Map {
    last: Option<String>,
}

impl ser::SerializeMap for Map {
    type Ok = ();
    type Error = Differs;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> R {
        let key = key.serialize(KeyText)?;
        if self.last.as_ref().is_some_and(|last| *last >= key) {
            return Err(Differs);
        }
        self.last = Some(key);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
        value.serialize(Check)
    }
    fn end(self) -> R {
        Ok(())
    }
}

/// A struct: each field name greater than the one before.
struct Struct {
    last: Option<&'static str>,
}

impl ser::SerializeStruct for Struct {
    type Ok = ();
    type Error = Differs;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> R {
        if self.last.is_some_and(|last| last >= key) {
            return Err(Differs);
        }
        self.last = Some(key);
        value.serialize(Check)
    }
    fn skip_field(&mut self, _: &'static str) -> R {
        Ok(())
    }
    fn end(self) -> R {
        Ok(())
    }
}

/// A map key, when it is a string (a `Value` map turns other keys into strings, which sort
/// differently).
struct KeyText;

impl ser::Serializer for KeyText {
    type Ok = String;
    type Error = Differs;
    type SerializeSeq = Impossible<String, Differs>;
    type SerializeTuple = Impossible<String, Differs>;
    type SerializeTupleStruct = Impossible<String, Differs>;
    type SerializeTupleVariant = Impossible<String, Differs>;
    type SerializeMap = Impossible<String, Differs>;
    type SerializeStruct = Impossible<String, Differs>;
    type SerializeStructVariant = Impossible<String, Differs>;

    fn serialize_str(self, v: &str) -> Result<String, Differs> {
        Ok(v.to_string())
    }
    fn serialize_bool(self, _: bool) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_i8(self, _: i8) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_i16(self, _: i16) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_i32(self, _: i32) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_i64(self, _: i64) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_u8(self, _: u8) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_u16(self, _: u16) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_u32(self, _: u32) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_u64(self, _: u64) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_f32(self, _: f32) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_f64(self, _: f64) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_char(self, _: char) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_none(self) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_unit(self) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, Differs> {
        Err(Differs)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Differs> {
        Err(Differs)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Differs> {
        Err(Differs)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Differs> {
        Err(Differs)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Differs> {
        Err(Differs)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Differs> {
        Err(Differs)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Differs> {
        Err(Differs)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Differs> {
        Err(Differs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    #[derive(serde::Serialize)]
    struct Sorted {
        a: u32,
        b: Option<String>,
        c: BTreeMap<String, u32>,
    }

    #[derive(serde::Serialize)]
    struct Unsorted {
        b: u32,
        a: u32,
    }

    #[test]
    fn only_sorted_string_keys_and_plain_values_pass() {
        let mut c = BTreeMap::new();
        c.insert("x".to_string(), 1);
        c.insert("y".to_string(), 2);
        assert!(in_value_order(&Sorted { a: 1, b: None, c }));
        assert!(!in_value_order(&Unsorted { b: 1, a: 2 }));
        let numeric: BTreeMap<u32, u32> = [(9, 1), (10, 2)].into_iter().collect();
        assert!(!in_value_order(&numeric), "\"10\" sorts before \"9\"");
        let mut h = HashMap::new();
        for k in ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"] {
            h.insert(k.to_string(), 0);
        }
        let sorted = h.keys().collect::<Vec<_>>().windows(2).all(|w| w[0] < w[1]);
        assert_eq!(in_value_order(&h), sorted);
        assert!(!in_value_order(&1.5f32));
        assert!(in_value_order(
            &serde_json::json!({"b": [1, {"d": 2, "c": 3}]})
        ));
    }
}
