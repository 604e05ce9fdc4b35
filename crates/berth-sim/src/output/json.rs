//! `-o json`: the `List` written item by item, each item serialized once.
//!
//! [`super::list`] writes an object directly when [`super::sorted::in_value_order`] says
//! its own serialization prints what its `Value` prints; that check is a serialization of
//! its own (every timestamp formatted once more: a fifth of writing JSON). Here the object
//! is serialized into a buffer through [`Checked`], which makes the same checks as it
//! passes every call on to `serde_json`'s pretty printer; when a check fails, the buffer is
//! thrown away and the object written through its `Value`, as before.
//!
//! The buffer holds the item as printed at the top level; in the `List` it sits two levels
//! down, so each of its lines after the first is indented by four more spaces (a JSON text
//! has no line break but those between its tokens: in strings they are escaped).

use std::cell::Cell;
use std::io::{self, Write};

use serde::ser::{self, Impossible, Serialize, Serializer};

use berth_core::Object;

use super::list::{for_each_item, Item, SortedEvent};
use super::sorted::key_text;
use super::OutputError;

use crate::store::Store;

/// Writes `store` as the pretty-printed `v1` `List` (without the final newline).
pub(super) fn write(store: &Store, out: &mut dyn Write) -> Result<(), OutputError> {
    out.write_all(b"{\n  \"apiVersion\": \"v1\",\n  \"items\": [")
        .map_err(OutputError::Write)?;
    let mut buf = Vec::with_capacity(1 << 12);
    let mut first = true;
    for_each_item(store, |item| {
        buf.clear();
        match item {
            Item::Object(obj) => object(obj, &mut buf)?,
            Item::Event(e) => pretty(&SortedEvent(e), &mut buf)?,
        }
        out.write_all(if first { b"\n    " } else { b",\n    " })
            .map_err(OutputError::Write)?;
        first = false;
        indented(&buf, out).map_err(OutputError::Write)
    })?;
    out.write_all(if first { b"]" } else { b"\n  ]" })
        .map_err(OutputError::Write)?;
    out.write_all(b",\n  \"kind\": \"List\",\n  \"metadata\": {}\n}")
        .map_err(OutputError::Write)
}

/// `text` with four spaces after each line break.
fn indented(text: &[u8], out: &mut dyn Write) -> io::Result<()> {
    let mut lines = text.split(|&b| b == b'\n');
    if let Some(line) = lines.next() {
        out.write_all(line)?;
    }
    for line in lines {
        out.write_all(b"\n    ")?;
        out.write_all(line)?;
    }
    Ok(())
}

fn pretty<T: Serialize + ?Sized>(value: &T, buf: &mut Vec<u8>) -> Result<(), OutputError> {
    value.serialize(&mut serde_json::Serializer::pretty(buf))?;
    Ok(())
}

fn object(obj: &Object, buf: &mut Vec<u8>) -> Result<(), OutputError> {
    let _direct = match obj {
        Object::Pod(o) => checked(&**o, buf),
        Object::Node(o) => checked(&**o, buf),
        Object::Reservation(o) => checked(&**o, buf),
        Object::NodeResourceTopology(o) => checked(&**o, buf),
        Object::PersistentVolumeClaim(o) => checked(&**o, buf),
        Object::CsiNode(o) => checked(&**o, buf),
        Object::PriorityClass(o) => checked(&**o, buf),
        Object::PodDisruptionBudget(o) => checked(&**o, buf),
        Object::Namespace(o) => checked(&**o, buf),
        Object::PersistentVolume(o) => checked(&**o, buf),
        Object::StorageClass(o) => checked(&**o, buf),
    }?;
    Ok(())
}

/// Writes `value` into `buf` as its `Value` prints, pretty: directly when every check of
/// [`Checked`] passes (then true), else through the `Value`.
pub(super) fn checked<T: Serialize + ?Sized>(
    value: &T,
    buf: &mut Vec<u8>,
) -> Result<bool, OutputError> {
    let differs = Cell::new(false);
    let direct = value.serialize(Checked {
        inner: &mut serde_json::Serializer::pretty(&mut *buf),
        differs: &differs,
    });
    match direct {
        Ok(()) => Ok(true),
        Err(_) if differs.get() => {
            buf.clear();
            pretty(&serde_json::to_value(value)?, buf)?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// A serializer that passes everything on to `inner` while checking what
/// [`super::sorted::in_value_order`] checks; on the first thing a `Value` would print
/// otherwise, it sets `differs` and fails.
struct Checked<'f, S> {
    inner: S,
    differs: &'f Cell<bool>,
}

/// `value`, serialized through [`Checked`].
struct Through<'a, 'f, T: ?Sized> {
    value: &'a T,
    differs: &'f Cell<bool>,
}

impl<T: Serialize + ?Sized> Serialize for Through<'_, '_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(Checked {
            inner: serializer,
            differs: self.differs,
        })
    }
}

fn differs<E: ser::Error>(flag: &Cell<bool>) -> E {
    flag.set(true);
    E::custom("not in the Value's order")
}

impl<'f, S: Serializer> Serializer for Checked<'f, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Seq<'f, S::SerializeSeq>;
    type SerializeTuple = Impossible<S::Ok, S::Error>;
    type SerializeTupleStruct = Impossible<S::Ok, S::Error>;
    type SerializeTupleVariant = Impossible<S::Ok, S::Error>;
    type SerializeMap = Map<'f, S::SerializeMap>;
    type SerializeStruct = Struct<'f, S::SerializeStruct>;
    type SerializeStructVariant = Impossible<S::Ok, S::Error>;

    fn serialize_bool(self, v: bool) -> Result<S::Ok, S::Error> {
        self.inner.serialize_bool(v)
    }
    fn serialize_i8(self, v: i8) -> Result<S::Ok, S::Error> {
        self.inner.serialize_i8(v)
    }
    fn serialize_i16(self, v: i16) -> Result<S::Ok, S::Error> {
        self.inner.serialize_i16(v)
    }
    fn serialize_i32(self, v: i32) -> Result<S::Ok, S::Error> {
        self.inner.serialize_i32(v)
    }
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.inner.serialize_i64(v)
    }
    fn serialize_u8(self, v: u8) -> Result<S::Ok, S::Error> {
        self.inner.serialize_u8(v)
    }
    fn serialize_u16(self, v: u16) -> Result<S::Ok, S::Error> {
        self.inner.serialize_u16(v)
    }
    fn serialize_u32(self, v: u32) -> Result<S::Ok, S::Error> {
        self.inner.serialize_u32(v)
    }
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.inner.serialize_u64(v)
    }
    fn serialize_i128(self, _: i128) -> Result<S::Ok, S::Error> {
        Err(differs(self.differs))
    }
    fn serialize_u128(self, _: u128) -> Result<S::Ok, S::Error> {
        Err(differs(self.differs))
    }
    // A `Value` holds an f32 as an f64, which prints more digits.
    fn serialize_f32(self, _: f32) -> Result<S::Ok, S::Error> {
        Err(differs(self.differs))
    }
    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        self.inner.serialize_f64(v)
    }
    fn serialize_char(self, v: char) -> Result<S::Ok, S::Error> {
        self.inner.serialize_char(v)
    }
    fn serialize_str(self, v: &str) -> Result<S::Ok, S::Error> {
        self.inner.serialize_str(v)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<S::Ok, S::Error> {
        Err(differs(self.differs))
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.inner.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.inner.serialize_some(&Through {
            value,
            differs: self.differs,
        })
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.inner.serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.inner.serialize_unit_struct(name)
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.inner.serialize_unit_variant(name, index, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.inner.serialize_newtype_struct(
            name,
            &Through {
                value,
                differs: self.differs,
            },
        )
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<S::Ok, S::Error> {
        Err(differs(self.differs))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        Ok(Seq {
            inner: self.inner.serialize_seq(len)?,
            differs: self.differs,
        })
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, S::Error> {
        Err(differs(self.differs))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        Err(differs(self.differs))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        Err(differs(self.differs))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        Ok(Map {
            inner: self.inner.serialize_map(len)?,
            differs: self.differs,
            last: None,
        })
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        Ok(Struct {
            inner: self.inner.serialize_struct(name, len)?,
            differs: self.differs,
            last: None,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        Err(differs(self.differs))
    }
}

struct Seq<'f, S> {
    inner: S,
    differs: &'f Cell<bool>,
}

impl<S: ser::SerializeSeq> ser::SerializeSeq for Seq<'_, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
        self.inner.serialize_element(&Through {
            value,
            differs: self.differs,
        })
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.inner.end()
    }
}

/// A map: each key a string greater than the one before.
struct Map<'f, S> {
    inner: S,
    differs: &'f Cell<bool>,
    last: Option<String>,
}

impl<S: ser::SerializeMap> ser::SerializeMap for Map<'_, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), S::Error> {
        let Some(text) = key_text(key) else {
            return Err(differs(self.differs));
        };
        if self.last.as_ref().is_some_and(|last| *last >= text) {
            return Err(differs(self.differs));
        }
        self.inner.serialize_key(text.as_str())?;
        self.last = Some(text);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
        self.inner.serialize_value(&Through {
            value,
            differs: self.differs,
        })
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.inner.end()
    }
}

/// A struct: each field name greater than the one before.
struct Struct<'f, S> {
    inner: S,
    differs: &'f Cell<bool>,
    last: Option<&'static str>,
}

impl<S: ser::SerializeStruct> ser::SerializeStruct for Struct<'_, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), S::Error> {
        if self.last.is_some_and(|last| last >= key) {
            return Err(differs(self.differs));
        }
        self.last = Some(key);
        self.inner.serialize_field(
            key,
            &Through {
                value,
                differs: self.differs,
            },
        )
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
        self.inner.skip_field(key)
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.inner.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::ser::{SerializeMap, SerializeSeq, SerializeStruct};

    /// Anything [`Checked`] passes or refuses, serialized as given (keys in the order
    /// given, repeated or not).
    #[derive(Debug, Clone)]
    enum Shape {
        Str(String),
        F32(f32),
        F64(f64),
        U(u64),
        I(i64),
        Bytes(Vec<u8>),
        Option(Option<Box<Shape>>),
        Seq(Vec<Shape>),
        Map(Vec<(String, Shape)>),
        IntMap(Vec<(u32, Shape)>),
        Struct(Vec<(&'static str, Shape)>),
        Newtype(Box<Shape>),
    }

    impl Serialize for Shape {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Shape::Str(v) => s.serialize_str(v),
                Shape::F32(v) => s.serialize_f32(*v),
                Shape::F64(v) => s.serialize_f64(*v),
                Shape::U(v) => s.serialize_u64(*v),
                Shape::I(v) => s.serialize_i64(*v),
                Shape::Bytes(v) => s.serialize_bytes(v),
                Shape::Option(None) => s.serialize_none(),
                Shape::Option(Some(v)) => s.serialize_some(v),
                Shape::Newtype(v) => s.serialize_newtype_struct("Newtype", v),
                Shape::Seq(items) => {
                    let mut seq = s.serialize_seq(Some(items.len()))?;
                    for i in items {
                        seq.serialize_element(i)?;
                    }
                    seq.end()
                }
                Shape::Map(entries) => {
                    let mut map = s.serialize_map(Some(entries.len()))?;
                    for (k, v) in entries {
                        map.serialize_entry(k, v)?;
                    }
                    map.end()
                }
                Shape::IntMap(entries) => {
                    let mut map = s.serialize_map(Some(entries.len()))?;
                    for (k, v) in entries {
                        map.serialize_entry(k, v)?;
                    }
                    map.end()
                }
                Shape::Struct(fields) => {
                    let mut st = s.serialize_struct("Struct", fields.len())?;
                    for (k, v) in fields {
                        st.serialize_field(k, v)?;
                    }
                    st.end()
                }
            }
        }
    }

    const FIELDS: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

    fn shape() -> impl Strategy<Value = Shape> {
        let leaf = prop_oneof![
            "[a-c\\n\"]{0,3}".prop_map(Shape::Str),
            any::<f32>().prop_map(Shape::F32),
            any::<f64>().prop_map(Shape::F64),
            any::<u64>().prop_map(Shape::U),
            any::<i64>().prop_map(Shape::I),
            prop::collection::vec(any::<u8>(), 0..3).prop_map(Shape::Bytes),
            Just(Shape::Option(None)),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(|s| Shape::Option(Some(Box::new(s)))),
                inner.clone().prop_map(|s| Shape::Newtype(Box::new(s))),
                prop::collection::vec(inner.clone(), 0..4).prop_map(Shape::Seq),
                prop::collection::vec(("[a-d]{0,2}", inner.clone()), 0..4).prop_map(Shape::Map),
                prop::collection::vec((0u32..12, inner.clone()), 0..3).prop_map(Shape::IntMap),
                prop::collection::vec((prop::sample::select(&FIELDS[..]), inner), 0..4)
                    .prop_map(Shape::Struct),
            ]
        })
    }

    /// Whatever is serialized, the bytes are those of its `Value`, pretty; the direct way is
    /// taken exactly when `in_value_order` says it prints the same.
    #[test]
    fn checked_output_prints_as_the_value() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 3000,
            ..ProptestConfig::default()
        });
        let direct_seen = Cell::new(0u32);
        runner
            .run(&shape(), |shape| {
                let Ok(value) = serde_json::to_value(&shape) else {
                    return Ok(());
                };
                let mut buf = Vec::new();
                let direct = checked(&shape, &mut buf).unwrap();
                prop_assert_eq!(
                    String::from_utf8(buf).unwrap(),
                    serde_json::to_string_pretty(&value).unwrap()
                );
                prop_assert_eq!(direct, super::super::sorted::in_value_order(&shape));
                direct_seen.set(direct_seen.get() + u32::from(direct));
                Ok(())
            })
            .unwrap();
        assert!(direct_seen.get() > 300, "direct only {} times", direct_seen.get());
    }

    #[test]
    fn items_are_indented_two_levels_down() {
        let mut out = Vec::new();
        indented(b"{\n  \"a\": \"x\\ny\"\n}", &mut out).unwrap();
        assert_eq!(out, b"{\n      \"a\": \"x\\ny\"\n    }");
    }
}
