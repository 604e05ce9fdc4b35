//! A reader for the plain subset of YAML most inputs are written in, straight into the
//! `serde_json::Value` the YAML decoder gives ([`super::Trees::Direct`]), at a fraction of
//! its cost: reading is most of `berth simulate`'s time on small runs, and libyaml's
//! tokens and events, with a `serde` pass over them, were most of reading.
//!
//! The subset: printable ASCII text in lines ending in `\n`; `---` lines between documents;
//! block mappings and sequences laid out by spaces (sequences also at their key's
//! indentation); single-line flow collections (`{a: 1, b: [x, y]}`); single-line plain
//! scalars; single-line quoted scalars without escapes; full-line and end-of-line comments.
//! Anything else, and anything in it the decoder could read another way or refuse (tabs,
//! anchors, aliases, tags, block scalars, multi-line scalars or collections, complex keys,
//! keys that are not strings or given twice, merge keys, a plain scalar continued on the
//! next line, a key of 1,000 bytes or more, directives), makes the reader give up
//! ([`Refused`]), and the caller reads the text with the decoder instead. So the reader
//! only needs to be right on what it accepts: there, it gives the decoder's documents,
//! with the decoder's indexes (held to that by a property test over random texts).
//!
//! Plain scalars are resolved as the decoder resolves them (null, booleans, integers,
//! floats, else strings), with its own rules, copied below.

use serde_json::{Map, Number, Value};

/// The text is not in the subset (or not valid YAML): read it with the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refused;

type R<T> = Result<T, Refused>;

/// Nesting deeper than this is refused: half of what the limits allow
/// ([`berth_api::limits::MAX_DEPTH`]), so that what this reader reads needs no check
/// (collections nest at most one level deeper than this counts).
const MAX_NESTING: usize = 30;

/// A simple key must fit in 1,024 characters (libyaml's limit); shorter, to be sure.
const MAX_KEY_BYTES: usize = 1000;

/// Reads every document of `text`, handing `each` its index and tree (`Null` for an empty
/// document), in order. On [`Refused`], `each` may have been given some documents.
pub(super) fn documents(text: &str, mut each: impl FnMut(usize, Value)) -> R<()> {
    let s = text.as_bytes();
    if !s.iter().all(|&b| b == b'\n' || (b' '..=b'~').contains(&b)) {
        return Err(Refused);
    }
    let mut r = Reader { t: text, s, i: 0 };
    let mut doc = 0;
    if r.next_content()?.is_none() && r.i == s.len() {
        // No document at all (the decoder gives one empty document: nothing to hand on).
        return Ok(());
    }
    loop {
        if r.at_document_start() {
            r.next_line();
        }
        let value = match r.next_content()? {
            Some(indent) => {
                r.i += indent;
                let v = r.block_node(indent, true, 0)?;
                if r.next_content()?.is_some() {
                    return Err(Refused);
                }
                v
            }
            None => Value::Null,
        };
        each(doc, value);
        doc += 1;
        if r.i == s.len() {
            return Ok(());
        }
    }
}

struct Reader<'a> {
    t: &'a str,
    /// `t`'s bytes.
    s: &'a [u8],
    /// The position: the start of a line, or within one.
    i: usize,
}

fn is_flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

impl Reader<'_> {
    /// The text from byte `range.start` to `range.end` (the subset is ASCII: any range is
    /// one of characters).
    fn text(&self, range: std::ops::Range<usize>) -> &str {
        self.t.get(range).unwrap_or_default()
    }

    /// The text from byte `start` to `end`, inclusive.
    fn text_to(&self, start: usize, end: usize) -> &str {
        self.t.get(start..=end).unwrap_or_default()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn at(&self, j: usize) -> Option<u8> {
        self.s.get(j).copied()
    }

    /// Whether `j` is the end of a line or of the text.
    fn eol(&self, j: usize) -> bool {
        matches!(self.at(j), None | Some(b'\n'))
    }

    /// Whether the line starting at `self.i` is `---`.
    fn at_document_start(&self) -> bool {
        self.s[self.i..].starts_with(b"---") && self.eol(self.i + 3)
    }

    /// Moves to the start of the next line (or the end of the text).
    fn next_line(&mut self) {
        match self.s[self.i..].iter().position(|&b| b == b'\n') {
            Some(n) => self.i += n + 1,
            None => self.i = self.s.len(),
        }
    }

    /// From the start of a line, skips blank and comment lines. Returns the indentation of
    /// the next line with content, staying at its start, or `None` at the end of the
    /// document (the end of the text or a `---` line).
    fn next_content(&mut self) -> R<Option<usize>> {
        loop {
            if self.i == self.s.len() || self.at_document_start() {
                return Ok(None);
            }
            let line = &self.s[self.i..];
            if line.starts_with(b"---") || line.starts_with(b"...") || line.starts_with(b"%") {
                return Err(Refused);
            }
            let indent = line.iter().take_while(|&&b| b == b' ').count();
            match line.get(indent) {
                None | Some(b'\n' | b'#') => self.next_line(),
                Some(_) => return Ok(Some(indent)),
            }
        }
    }

    /// After a node that ends its line: spaces, then a comment (after at least one space)
    /// or the end of the line. Moves to the next line.
    fn end_of_line(&mut self) -> R<()> {
        let start = self.i;
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
        match self.peek() {
            None | Some(b'\n') => {}
            Some(b'#') if self.i > start => {}
            _ => return Err(Refused),
        }
        self.next_line();
        Ok(())
    }

    /// A block node starting at `self.i`, in column `col`; `line_start` says whether only
    /// spaces precede it on its line. Leaves `self.i` at the start of the line after it.
    fn block_node(&mut self, col: usize, line_start: bool, depth: usize) -> R<Value> {
        if depth > MAX_NESTING {
            return Err(Refused);
        }
        if self.peek() == Some(b'-') && matches!(self.at(self.i + 1), None | Some(b' ' | b'\n')) {
            // `- - x` (a sequence opened in a sequence's entry): not in the subset.
            if !line_start {
                return Err(Refused);
            }
            return self.block_sequence(col, false, depth);
        }
        if matches!(self.peek(), Some(b'[' | b'{')) {
            let v = self.flow_node(depth + 1)?;
            self.end_of_line()?;
            return Ok(v);
        }
        let start = self.i;
        let scalar = self.scalar(false)?;
        if self.peek() == Some(b':') && matches!(self.at(self.i + 1), None | Some(b' ' | b'\n')) {
            self.i = start;
            return self.block_mapping(col, depth);
        }
        self.end_of_line()?;
        Ok(scalar)
    }

    /// A block sequence whose `-` are in column `col` (`indentless`: at its key's column,
    /// so a line there without `-` ends it). Starts at the first `-`.
    fn block_sequence(&mut self, col: usize, indentless: bool, depth: usize) -> R<Value> {
        let mut items = Vec::new();
        loop {
            // At `-`, followed by a space or the end of the line.
            self.i += 1;
            while self.peek() == Some(b' ') {
                self.i += 1;
            }
            let item = match self.peek() {
                None | Some(b'\n' | b'#') => {
                    if self.peek() == Some(b'#') && self.s[self.i - 1] != b' ' {
                        return Err(Refused);
                    }
                    self.next_line();
                    self.nested(col, depth)?
                }
                Some(_) => {
                    let at = self.i - self.line_start();
                    self.block_node(at, false, depth + 1)?
                }
            };
            items.push(item);
            match self.next_content()? {
                Some(indent) if indent == col => {
                    let j = self.i + indent;
                    if self.at(j) == Some(b'-')
                        && matches!(self.at(j + 1), None | Some(b' ' | b'\n'))
                    {
                        self.i = j;
                        continue;
                    }
                    if indentless {
                        return Ok(Value::Array(items));
                    }
                    return Err(Refused);
                }
                Some(indent) if indent > col => return Err(Refused),
                _ => return Ok(Value::Array(items)),
            }
        }
    }

    /// The value of a key or `-` whose line ends after it: the block node on the next lines,
    /// indented more than `col`, or nothing (null).
    fn nested(&mut self, col: usize, depth: usize) -> R<Value> {
        match self.next_content()? {
            Some(indent) if indent > col => {
                self.i += indent;
                self.block_node(indent, true, depth + 1)
            }
            _ => Ok(Value::Null),
        }
    }

    /// The start of the line `self.i` is on.
    fn line_start(&self) -> usize {
        self.s[..self.i]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |n| n + 1)
    }

    /// A block mapping whose keys are in column `col`, starting at the first key.
    fn block_mapping(&mut self, col: usize, depth: usize) -> R<Value> {
        let mut map = Map::new();
        loop {
            let start = self.i;
            let key = self.key(false)?;
            // At `:`, followed by a space or the end of the line.
            if self.peek() != Some(b':')
                || !matches!(self.at(self.i + 1), None | Some(b' ' | b'\n'))
                || self.i - start >= MAX_KEY_BYTES
            {
                return Err(Refused);
            }
            self.i += 1;
            let spaced = self.peek() == Some(b' ');
            while self.peek() == Some(b' ') {
                self.i += 1;
            }
            let value = match self.peek() {
                None | Some(b'\n' | b'#') => {
                    if self.peek() == Some(b'#') && !spaced {
                        return Err(Refused);
                    }
                    self.next_line();
                    match self.next_content()? {
                        Some(indent) if indent == col => {
                            let j = self.i + indent;
                            if self.at(j) == Some(b'-')
                                && matches!(self.at(j + 1), None | Some(b' ' | b'\n'))
                            {
                                self.i = j;
                                self.block_sequence(col, true, depth + 1)?
                            } else {
                                Value::Null
                            }
                        }
                        _ => self.nested(col, depth)?,
                    }
                }
                Some(b'[' | b'{') => {
                    let v = self.flow_node(depth + 1)?;
                    self.end_of_line()?;
                    v
                }
                Some(_) => {
                    let v = self.scalar(false)?;
                    self.end_of_line()?;
                    v
                }
            };
            if key == "<<" || map.insert(key, value).is_some() {
                return Err(Refused);
            }
            match self.next_content()? {
                Some(indent) if indent == col => self.i += indent,
                Some(indent) if indent > col => return Err(Refused),
                _ => return Ok(Value::Object(map)),
            }
        }
    }

    /// A mapping key: a scalar that reads as a string. Leaves `self.i` after it.
    fn key(&mut self, flow: bool) -> R<String> {
        match self.scalar(flow)? {
            Value::String(s) => Ok(s),
            _ => Err(Refused),
        }
    }

    /// A flow collection, on one line, starting at `[` or `{`.
    fn flow_node(&mut self, depth: usize) -> R<Value> {
        if depth > MAX_NESTING {
            return Err(Refused);
        }
        match self.peek() {
            Some(b'[') => {
                self.i += 1;
                self.spaces();
                let mut items = Vec::new();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                loop {
                    items.push(self.flow_item(depth)?);
                    self.spaces();
                    match self.peek() {
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Array(items));
                        }
                        Some(b',') => {
                            self.i += 1;
                            self.spaces();
                        }
                        _ => return Err(Refused),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                self.spaces();
                let mut map = Map::new();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(Value::Object(map));
                }
                loop {
                    let start = self.i;
                    let key = self.key(true)?;
                    // `:` and a space: the value is not empty.
                    if self.peek() != Some(b':')
                        || self.at(self.i + 1) != Some(b' ')
                        || self.i - start >= MAX_KEY_BYTES
                    {
                        return Err(Refused);
                    }
                    self.i += 1;
                    self.spaces();
                    let value = self.flow_item(depth)?;
                    if key == "<<" || map.insert(key, value).is_some() {
                        return Err(Refused);
                    }
                    self.spaces();
                    match self.peek() {
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Value::Object(map));
                        }
                        Some(b',') => {
                            self.i += 1;
                            self.spaces();
                        }
                        _ => return Err(Refused),
                    }
                }
            }
            _ => Err(Refused),
        }
    }

    /// An entry of a flow collection: a flow collection or a scalar.
    fn flow_item(&mut self, depth: usize) -> R<Value> {
        match self.peek() {
            Some(b'[' | b'{') => self.flow_node(depth + 1),
            _ => self.scalar(true),
        }
    }

    fn spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    /// A scalar on one line, plain or quoted, resolved. Leaves `self.i` just after it: for a
    /// plain scalar, before the spaces that end it.
    fn scalar(&mut self, flow: bool) -> R<Value> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => {
                let start = self.i + 1;
                let mut out = String::new();
                let mut j = start;
                loop {
                    match self.at(j) {
                        None | Some(b'\n' | b'\\') if q == b'"' => return Err(Refused),
                        None | Some(b'\n') => return Err(Refused),
                        Some(b) if b == q => {
                            if q == b'\'' && self.at(j + 1) == Some(b'\'') {
                                out.push_str(self.text_to(start, j));
                                // The pair stands for one quote: skip the second, keep going
                                // from after it with a fresh run.
                                return self.single_quoted_rest(out, j + 2, flow);
                            }
                            out.push_str(self.text(start..j));
                            self.i = j + 1;
                            self.after_quoted(flow)?;
                            return Ok(Value::String(out));
                        }
                        Some(_) => j += 1,
                    }
                }
            }
            _ => {
                let start = self.i;
                let first = self.peek().ok_or(Refused)?;
                let second = self.at(start + 1);
                let starts_plain = match first {
                    b'-' | b'.' | b'+' => second.is_some_and(|b| b.is_ascii_alphanumeric()),
                    b => b.is_ascii_alphanumeric() || matches!(b, b'_' | b'/' | b'~'),
                };
                if !starts_plain {
                    return Err(Refused);
                }
                let mut end = start;
                let mut j = start;
                while let Some(b) = self.at(j) {
                    match b {
                        b'\n' => break,
                        b' ' => {}
                        b'#' if self.s[j - 1] == b' ' => break,
                        b':' => match self.at(j + 1) {
                            None | Some(b' ' | b'\n') => break,
                            Some(n) if flow && (is_flow_indicator(n) || n == b'?') => {
                                return Err(Refused)
                            }
                            Some(_) => end = j + 1,
                        },
                        b if is_flow_indicator(b) => {
                            if flow {
                                break;
                            }
                            if b != b',' {
                                return Err(Refused);
                            }
                            end = j + 1;
                        }
                        _ => end = j + 1,
                    }
                    j += 1;
                }
                self.i = end;
                resolve(self.text(start..end))
            }
        }
    }

    /// The rest of a single-quoted scalar from `j`, after `out` (a `''` was just read).
    fn single_quoted_rest(&mut self, mut out: String, mut j: usize, flow: bool) -> R<Value> {
        let mut run = j;
        loop {
            match self.at(j) {
                None | Some(b'\n') => return Err(Refused),
                Some(b'\'') => {
                    if self.at(j + 1) == Some(b'\'') {
                        out.push_str(self.text_to(run, j));
                        j += 2;
                        run = j;
                        continue;
                    }
                    out.push_str(self.text(run..j));
                    self.i = j + 1;
                    self.after_quoted(flow)?;
                    return Ok(Value::String(out));
                }
                Some(_) => j += 1,
            }
        }
    }

    /// After a closing quote: what may follow it (checked again by the caller).
    fn after_quoted(&self, flow: bool) -> R<()> {
        match self.peek() {
            None | Some(b' ' | b'\n' | b':') => Ok(()),
            Some(b',' | b']' | b'}') if flow => Ok(()),
            _ => Err(Refused),
        }
    }
}

/// A plain scalar as the decoder reads it into a `Value` (`serde_yaml_ng`'s
/// `visit_untagged_scalar`, then [`super::DirectVisitor`]): an integer beyond 64 bits is
/// refused, as the direct read refuses it.
fn resolve(v: &str) -> R<Value> {
    if v.is_empty() || matches!(v, "null" | "Null" | "NULL" | "~") {
        return Ok(Value::Null);
    }
    match v {
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        _ => {}
    }
    // Only a scalar starting with a letter (and none of the words above) is surely a
    // string: skip the number parsers for it.
    if v.as_bytes()[0].is_ascii_alphabetic() {
        return Ok(Value::String(v.to_string()));
    }
    if let Some(int) = parse_unsigned_int(v, u64::from_str_radix) {
        return Ok(Value::Number(int.into()));
    }
    if let Some(int) = parse_negative_int(v, i64::from_str_radix) {
        return Ok(Value::Number(int.into()));
    }
    if parse_unsigned_int(v, u128::from_str_radix).is_some()
        || parse_negative_int(v, i128::from_str_radix).is_some()
    {
        return Err(Refused);
    }
    if !digits_but_not_number(v) {
        if let Some(float) = parse_f64(v) {
            return Ok(Number::from_f64(float).map_or(Value::Null, Value::Number));
        }
    }
    Ok(Value::String(v.to_string()))
}

// serde_yaml_ng 0.10's scalar rules (src/de.rs), unchanged.

fn parse_unsigned_int<T>(
    scalar: &str,
    from_str_radix: fn(&str, radix: u32) -> Result<T, std::num::ParseIntError>,
) -> Option<T> {
    let unpositive = scalar.strip_prefix('+').unwrap_or(scalar);
    if let Some(rest) = unpositive.strip_prefix("0x") {
        if rest.starts_with(['+', '-']) {
            return None;
        }
        if let Ok(int) = from_str_radix(rest, 16) {
            return Some(int);
        }
    }
    if let Some(rest) = unpositive.strip_prefix("0o") {
        if rest.starts_with(['+', '-']) {
            return None;
        }
        if let Ok(int) = from_str_radix(rest, 8) {
            return Some(int);
        }
    }
    if let Some(rest) = unpositive.strip_prefix("0b") {
        if rest.starts_with(['+', '-']) {
            return None;
        }
        if let Ok(int) = from_str_radix(rest, 2) {
            return Some(int);
        }
    }
    if unpositive.starts_with(['+', '-']) {
        return None;
    }
    if digits_but_not_number(scalar) {
        return None;
    }
    from_str_radix(unpositive, 10).ok()
}

fn parse_negative_int<T>(
    scalar: &str,
    from_str_radix: fn(&str, radix: u32) -> Result<T, std::num::ParseIntError>,
) -> Option<T> {
    if let Some(rest) = scalar.strip_prefix("-0x") {
        let negative = format!("-{rest}");
        if let Ok(int) = from_str_radix(&negative, 16) {
            return Some(int);
        }
    }
    if let Some(rest) = scalar.strip_prefix("-0o") {
        let negative = format!("-{rest}");
        if let Ok(int) = from_str_radix(&negative, 8) {
            return Some(int);
        }
    }
    if let Some(rest) = scalar.strip_prefix("-0b") {
        let negative = format!("-{rest}");
        if let Ok(int) = from_str_radix(&negative, 2) {
            return Some(int);
        }
    }
    if digits_but_not_number(scalar) {
        return None;
    }
    from_str_radix(scalar, 10).ok()
}

fn parse_f64(scalar: &str) -> Option<f64> {
    let unpositive = if let Some(unpositive) = scalar.strip_prefix('+') {
        if unpositive.starts_with(['+', '-']) {
            return None;
        }
        unpositive
    } else {
        scalar
    };
    if let ".inf" | ".Inf" | ".INF" = unpositive {
        return Some(f64::INFINITY);
    }
    if let "-.inf" | "-.Inf" | "-.INF" = scalar {
        return Some(f64::NEG_INFINITY);
    }
    if let ".nan" | ".NaN" | ".NAN" = scalar {
        return Some(f64::NAN.copysign(1.0));
    }
    if let Ok(float) = unpositive.parse::<f64>() {
        if float.is_finite() {
            return Some(float);
        }
    }
    None
}

fn digits_but_not_number(scalar: &str) -> bool {
    let scalar = scalar.strip_prefix(['-', '+']).unwrap_or(scalar);
    scalar.len() > 1 && scalar.starts_with('0') && scalar[1..].bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{for_each_document, Parsed, Trees};
    use proptest::prelude::*;

    /// The documents the fast read gives (non-empty ones, with their indexes).
    fn fast(text: &str) -> R<Vec<(usize, Value)>> {
        let mut out = Vec::new();
        documents(text, |doc, v| {
            if !v.is_null() {
                out.push((doc, v));
            }
        })?;
        Ok(out)
    }

    /// What reading with the decoder gives: [`Trees::Direct`], else [`Trees::ViaYaml`], as
    /// `parse` reads; `None` for bad input.
    fn reference(text: &str) -> Option<Vec<(usize, Value)>> {
        let mut out = Vec::new();
        match for_each_document("t", text, Trees::Direct, |d, v| out.push((d, v))) {
            Ok(()) => Some(out),
            Err(Parsed::Redo) => {
                out.clear();
                for_each_document("t", text, Trees::ViaYaml, |d, v| out.push((d, v)))
                    .ok()
                    .map(|()| out)
            }
            Err(Parsed::Bad(_)) => None,
        }
    }

    /// Holds the fast read to the reference on `text`: it refuses, or reads what the
    /// decoder reads.
    fn agrees(text: &str) -> Result<bool, String> {
        match fast(text) {
            Err(Refused) => Ok(false),
            Ok(got) => match reference(text) {
                Some(want) if want == got => Ok(true),
                want => Err(format!("{text:?}\nfast read: {got:?}\ndecoder:   {want:?}")),
            },
        }
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: pod-7}\nspec: {containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 100m, memory: 500Mi}}}]}\n---\n";
    const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node-3, labels: {topology.kubernetes.io/zone: zone-3}}\nstatus: {allocatable: {cpu: \"4\", memory: 32Gi, pods: \"110\"}}\n---\n";
    const BLOCK: &str = "# a pod\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0   # the first\n  namespace: prod\n  labels:\n    app: web\n    tier: 'front'\n  annotations: {}\nspec:\n  priority: -5\n  containers:\n  - name: c\n    image: \"nginx:1.25\"\n    args: [\"--port\", 8080, 'it''s']\n    resources:\n      requests:\n        cpu: 0.5\n        memory: 1Gi\n  tolerations:\n    - key: k\n      operator: Exists\n      effect:\n\n  nodeSelector:\n    disk: ~\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n}}\n";

    /// The inputs `gen_cluster` writes and the block style people write are read by the
    /// fast path (else it would only be a slower way to the decoder).
    #[test]
    fn common_inputs_are_in_the_subset_and_read_as_the_decoder_reads_them() {
        for text in [POD, NODE, BLOCK, &format!("{NODE}{POD}{POD}")] {
            assert_eq!(agrees(text), Ok(true), "{text}");
        }
        let docs = fast(BLOCK).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].0, 0, "the comment before `---` opens no document");
        assert_eq!(docs[1].0, 2, "empty documents keep their index");
    }

    /// Every YAML file of the repository (scenarios, examples) is read fast as the decoder
    /// reads it, or refused; most are read fast.
    #[test]
    fn the_repository_s_yaml_files_read_as_the_decoder_reads_them() {
        fn yaml_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for p in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                if p.is_dir() {
                    yaml_files(&p, out);
                } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        yaml_files(&root.join("tests"), &mut files);
        yaml_files(&root.join("examples"), &mut files);
        let (mut fast_read, mut all) = (0, 0);
        for file in &files {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            all += 1;
            match agrees(&text) {
                Ok(read) => fast_read += usize::from(read),
                Err(e) => panic!("{}: {e}", file.display()),
            }
        }
        eprintln!("{fast_read} of {all} files read fast");
        assert!(
            all > 50 && fast_read * 10 > all * 8,
            "{fast_read} of {all} read fast"
        );
    }

    #[test]
    fn what_the_decoder_could_read_otherwise_is_refused() {
        for text in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: |\n  text\n",
            "a: b\n  c\n",
            "a: [1,\n  2]\n",
            "a: 1\na: 2\n",
            "<<: {a: 1}\n",
            "1: a\n",
            "? a\n: b\n",
            "a:\tb\n",
            "%YAML 1.1\n---\na: 1\n",
            "a: 1\n...\n",
            "- - a\n",
            "a: \"x\\ty\"\n",
            "a: 99999999999999999999\n",
            "a: b: c\n",
            "{a: 1}: b\n",
            "a: [b: c]\n",
            "a: {b: }\n",
            "a: [1, 2,]\n",
            "a: {b:, c}\n",
            "caf\u{e9}: 1\n",
            "a: 1\r\n",
            "a: 1\n\"q\":0\n",
        ] {
            assert_eq!(fast(text), Err(Refused), "{text:?}");
        }
        let long_key = format!("{}: 1\n", "k".repeat(1200));
        assert_eq!(fast(&long_key), Err(Refused));
        // Deep nesting is left to the limits' check.
        let flow = format!("a: {}{}\n", "[".repeat(40), "]".repeat(40));
        assert_eq!(fast(&flow), Err(Refused));
        let block: String = (0..40).map(|d| format!("{}k:\n", " ".repeat(d))).collect();
        assert_eq!(fast(&block), Err(Refused));
        let shallow: String = (0..20).map(|d| format!("{}k:\n", " ".repeat(d))).collect();
        assert_eq!(agrees(&shallow), Ok(true));
    }

    /// A random tree, written out in YAML by [`write`].
    #[derive(Debug, Clone)]
    enum Node {
        Scalar(&'static str),
        Map(Vec<(&'static str, Node)>),
        Seq(Vec<Node>),
    }

    const SCALARS: &[&str] = &[
        "a",
        "web",
        "100m",
        "500Mi",
        "32Gi",
        "4",
        "0",
        "-1",
        "+1",
        "007",
        "0x1F",
        "0o17",
        "0b101",
        "-0x1A",
        "1e3",
        "1.5",
        "-.inf",
        ".nan",
        ".inf",
        "1_000",
        "0.",
        ".5",
        "+.5",
        "99999999999999999999",
        "-99999999999999999999",
        "18446744073709551615",
        "-9223372036854775808",
        "true",
        "False",
        "null",
        "~",
        "NULL",
        "yes",
        "a b",
        "a:b",
        "http://x:80/p",
        "a#b",
        "a #b",
        "a,b",
        "a]b",
        "registry.k8s.io/pause:3.10",
        "-x",
        ".x",
        "_a",
        "~x",
        "12:30",
        "1.2.3",
        "-",
        "a'b",
        "a\"b",
        "\"4\"",
        "\"\"",
        "\"a: b\"",
        "\"# c\"",
        "'x'",
        "''",
        "'it''s'",
        "'''",
        "\"a\\nb\"",
        "'a\"b'",
        "\"a\" b",
        "*x",
        "&a b",
        "!t x",
        "|",
        ">",
        "@a",
        "%a",
        "`a",
        "a:",
        "?a",
        "-1:2",
        "a: b",
        "{}",
        "[]",
        "a\tb",
        "é",
    ];
    const KEYS: &[&str] = &[
        "a", "b", "c", "name", "a b", "1", "true", "<<", "\"q\"", "'k'", "x.y/z", "-k", "~",
        "null", "k:v", "\"a\"", "a#", "0x1", "'a'",
    ];

    fn node() -> impl Strategy<Value = Node> {
        let leaf = prop::sample::select(SCALARS).prop_map(Node::Scalar);
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec((prop::sample::select(KEYS), inner.clone()), 0..4)
                    .prop_map(Node::Map),
                prop::collection::vec(inner, 0..4).prop_map(Node::Seq),
            ]
        })
    }

    /// Writes trees as YAML, each choice of layout taken from `choices`.
    struct Writer<'a> {
        choices: &'a [u8],
        next: usize,
        out: String,
    }

    impl Writer<'_> {
        fn choose(&mut self, n: u8) -> u8 {
            let c = self.choices.get(self.next).copied().unwrap_or(0);
            self.next += 1;
            c % n
        }

        fn end_line(&mut self) {
            match self.choose(8) {
                0 => self.out.push_str(" # c"),
                1 => self.out.push_str("  "),
                2 => self.out.push_str("\n# c"),
                3 => self.out.push_str("\n\n  # c"),
                _ => {}
            }
            self.out.push('\n');
        }

        fn flow(&mut self, n: &Node) {
            match n {
                Node::Scalar(s) => self.out.push_str(s),
                Node::Map(entries) => {
                    self.out.push('{');
                    for (i, (k, v)) in entries.iter().enumerate() {
                        if i > 0 {
                            self.out.push_str(", ");
                        }
                        self.out.push_str(k);
                        self.out.push_str(": ");
                        self.flow(v);
                    }
                    self.out.push('}');
                }
                Node::Seq(items) => {
                    self.out.push('[');
                    for (i, v) in items.iter().enumerate() {
                        if i > 0 {
                            self.out.push_str(", ");
                        }
                        self.flow(v);
                    }
                    self.out.push(']');
                }
            }
        }

        fn is_block(&mut self, n: &Node) -> bool {
            match n {
                Node::Map(e) if !e.is_empty() => self.choose(4) != 0,
                Node::Seq(e) if !e.is_empty() => self.choose(4) != 0,
                _ => false,
            }
        }

        /// `n` in block style, its lines indented by `indent`; the first line's
        /// indentation is already written when `started`.
        fn block(&mut self, n: &Node, indent: usize, mut started: bool) {
            let pad = |w: &mut Self, started: &mut bool| {
                if !*started {
                    w.out.push_str(&" ".repeat(indent));
                }
                *started = false;
            };
            match n {
                Node::Map(entries) => {
                    for (k, v) in entries {
                        pad(self, &mut started);
                        self.out.push_str(k);
                        self.out.push(':');
                        if self.is_block(v) {
                            self.end_line();
                            let step = match v {
                                Node::Seq(_) => self.choose(4) as usize,
                                _ => 1 + self.choose(4) as usize,
                            };
                            self.block(v, indent + step, false);
                        } else {
                            self.out.push(' ');
                            self.flow(v);
                            self.end_line();
                        }
                    }
                }
                Node::Seq(items) => {
                    for v in items {
                        pad(self, &mut started);
                        self.out.push('-');
                        if self.is_block(v) {
                            if self.choose(2) == 0 {
                                let step = 1 + self.choose(2) as usize;
                                self.out.push_str(&" ".repeat(step));
                                self.block(v, indent + 1 + step, true);
                            } else {
                                self.end_line();
                                let step = 1 + self.choose(4) as usize;
                                self.block(v, indent + step, false);
                            }
                        } else {
                            self.out.push(' ');
                            self.flow(v);
                            self.end_line();
                        }
                    }
                }
                Node::Scalar(_) => {
                    pad(self, &mut started);
                    self.flow(n);
                    self.end_line();
                }
            }
        }

        fn document(&mut self, n: &Node) {
            if self.is_block(n) {
                self.block(n, 0, false);
            } else {
                self.flow(n);
                self.end_line();
            }
        }
    }

    const EDITS: &[u8] = b" \n:-#{}[],'\"a1\t&*!|>?%.";

    fn text() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(node(), 1..4),
            prop::collection::vec(any::<u8>(), 64),
            prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, 0..EDITS.len()), 0..3),
            any::<bool>(),
        )
            .prop_map(|(docs, choices, edits, edit)| {
                let mut w = Writer {
                    choices: &choices,
                    next: 0,
                    out: String::new(),
                };
                if w.choose(2) == 0 {
                    w.out.push_str("---\n");
                }
                for (i, d) in docs.iter().enumerate() {
                    if i > 0 {
                        let sep = if w.choose(6) == 0 {
                            "---\n---\n"
                        } else {
                            "---\n"
                        };
                        w.out.push_str(sep);
                    }
                    w.document(d);
                }
                if w.choose(3) == 0 {
                    w.out.push_str("---\n");
                }
                let mut text = w.out.into_bytes();
                if edit {
                    for (at, op, c) in edits {
                        let at = at.index(text.len() + 1);
                        match op {
                            0 => text.insert(at, EDITS[c]),
                            1 if at < text.len() => {
                                text.remove(at);
                            }
                            _ if at < text.len() => text[at] = EDITS[c],
                            _ => {}
                        }
                    }
                }
                String::from_utf8_lossy(&text).into_owned()
            })
    }

    /// Over random texts (trees in random layouts, some of them edited at random), the fast
    /// read refuses or reads what the decoder reads. It also reads most unedited ones.
    #[test]
    fn the_fast_read_refuses_or_reads_as_the_decoder() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 4000,
            ..ProptestConfig::default()
        });
        let accepted = std::cell::Cell::new(0u32);
        runner
            .run(&text(), |text| {
                // The reference holds the text to the limits first: what is read fast is
                // within them.
                match agrees(&text) {
                    Ok(read) => accepted.set(accepted.get() + u32::from(read)),
                    Err(e) => return Err(TestCaseError::fail(e)),
                }
                Ok(())
            })
            .unwrap();
        assert!(accepted.get() > 400, "only {} read fast", accepted.get());
    }
}
