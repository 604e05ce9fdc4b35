//! `-o json`: the `List` written item by item, each item serialized once.
//!
//! [`super::list`] writes an object directly when [`super::sorted::in_value_order`] says
//! its own serialization prints what its `Value` prints; that check is a serialization of
//! its own (every timestamp formatted once more: a fifth of writing JSON). Here the object
//! is serialized into a buffer through [`Checked`], which makes the same checks as it
//! passes every call on to `serde_json`'s pretty printer; when a check fails, the buffer is
//! thrown away and the object written through its `Value`, as before.
//!
//! The buffer holds the item as `serde_json`'s pretty printer prints it two levels down,
//! where it sits in the `List` ([`Nested`]).

use std::cell::Cell;
use std::io::{self, Write};

use serde::ser::{self, Impossible, Serialize, Serializer};

use berth_core::Object;

use super::list::{for_each_item, Item, SortedEvent};
use super::meta::WithMeta;
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
            Item::Event(e) => pretty(&SortedEvent(e), &mut buf, ITEM_DEPTH)?,
        }
        out.write_all(if first { b"\n    " } else { b",\n    " })
            .map_err(OutputError::Write)?;
        first = false;
        out.write_all(&buf).map_err(OutputError::Write)
    })?;
    out.write_all(if first { b"]" } else { b"\n  ]" })
        .map_err(OutputError::Write)?;
    out.write_all(b",\n  \"kind\": \"List\",\n  \"metadata\": {}\n}")
        .map_err(OutputError::Write)
}

/// How deep the items sit in the `List`: in the object, in `items`.
const ITEM_DEPTH: usize = 2;

/// `serde_json`'s `PrettyFormatter` (two spaces a level), starting `depth` levels down:
/// what it prints for a value at that depth of a larger text.
struct Nested {
    depth: usize,
    has_value: bool,
}

impl Nested {
    fn at(depth: usize) -> Self {
        Nested {
            depth,
            has_value: false,
        }
    }

    fn indent<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        const SPACES: &[u8; 64] =
            b"                                                                ";
        let mut n = 2 * self.depth;
        while n > 0 {
            let k = n.min(SPACES.len());
            w.write_all(&SPACES[..k])?;
            n -= k;
        }
        Ok(())
    }

    fn open<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            w.write_all(b"\n")?;
            self.indent(w)?;
        }
        w.write_all(bracket)
    }

    fn next<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        w.write_all(if first { b"\n" } else { b",\n" })?;
        self.indent(w)
    }
}

impl serde_json::ser::Formatter for Nested {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.next(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.next(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

fn pretty<T: Serialize + ?Sized>(
    value: &T,
    buf: &mut Vec<u8>,
    depth: usize,
) -> Result<(), OutputError> {
    value.serialize(&mut serde_json::Serializer::with_formatter(
        buf,
        Nested::at(depth),
    ))?;
    Ok(())
}

fn object(obj: &Object, buf: &mut Vec<u8>) -> Result<(), OutputError> {
    let _direct = match obj {
        // The two kinds a simulation has by the thousand: their metadata's times printed
        // without jiff's format-string printer (see `meta`).
        Object::Pod(o) => checked(&WithMeta::pod(o), buf, ITEM_DEPTH),
        Object::Node(o) => checked(&WithMeta::node(o), buf, ITEM_DEPTH),
        Object::Reservation(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::NodeResourceTopology(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::PersistentVolumeClaim(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::CsiNode(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::PriorityClass(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::PodDisruptionBudget(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::Namespace(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::PersistentVolume(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::StorageClass(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::CsiDriver(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::CsiStorageCapacity(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::Deployment(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::ReplicaSet(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::StatefulSet(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::PodMigrationJob(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::ResourceSlice(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::DeviceClass(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::ResourceClaim(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::ResourceClaimTemplate(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::PodGroup(o) => checked(&**o, buf, ITEM_DEPTH),
        Object::Workload(o) => checked(&**o, buf, ITEM_DEPTH),
    }?;
    Ok(())
}

/// Writes `value` into `buf` as its `Value` prints, pretty, `depth` levels down: directly when every check of
/// [`Checked`] passes (then true), else through the `Value`.
pub(super) fn checked<T: Serialize + ?Sized>(
    value: &T,
    buf: &mut Vec<u8>,
    depth: usize,
) -> Result<bool, OutputError> {
    let differs = Cell::new(false);
    let direct = value.serialize(Checked {
        inner: &mut serde_json::Serializer::with_formatter(&mut *buf, Nested::at(depth)),
        differs: &differs,
    });
    match direct {
        Ok(()) => Ok(true),
        Err(_) if differs.get() => {
            buf.clear();
            pretty(&serde_json::to_value(value)?, buf, depth)?;
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
                let direct = checked(&shape, &mut buf, 0).unwrap();
                prop_assert_eq!(
                    String::from_utf8(buf).unwrap(),
                    serde_json::to_string_pretty(&value).unwrap()
                );
                prop_assert_eq!(direct, super::super::sorted::in_value_order(&shape));
                direct_seen.set(direct_seen.get() + u32::from(direct));
                Ok(())
            })
            .unwrap();
        assert!(
            direct_seen.get() > 300,
            "direct only {} times",
            direct_seen.get()
        );
    }

    #[test]
    fn nested_prints_what_pretty_prints_deeper_down() {
        let value = serde_json::json!({"a": [1, {"b": "x\ny", "c": []}, {}], "d": {"e": null}});
        let whole =
            serde_json::to_string_pretty(&serde_json::json!({"k": [value.clone()]})).unwrap();
        let mut buf = Vec::new();
        pretty(&value, &mut buf, 2).unwrap();
        let part = String::from_utf8(buf).unwrap();
        assert!(
            whole.contains(&format!("\n    {part}\n")),
            "{whole}\n{part}"
        );
        let mut deep = Vec::new();
        pretty(&value, &mut deep, 40).unwrap();
        assert!(String::from_utf8(deep)
            .unwrap()
            .contains(&format!("\n{}\"b\"", " ".repeat(86))));
    }
}
