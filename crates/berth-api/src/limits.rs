//! Limits on text berth reads before it reaches a library that is slow on it.
//!
//! Scenario files and scheduler configurations are YAML, decoded by `serde_yaml_ng` over
//! libyaml. Two shapes make that decoding superlinear, so a small file could hold berth for
//! minutes or exhaust memory:
//!
//! - **deep flow nesting** (`[[[[…`): libyaml's scanner revisits every open flow level on
//!   each token, so the time grows with the square of the depth (100,000 brackets, 200 KB,
//!   took 20 seconds to be rejected by the recursion limit that only applies afterwards);
//! - **alias expansion** (`&a [1,1,…]` then `[*a,*a,…]`): each alias is replayed in full, so
//!   50 KB of YAML expanded past 8 GB before anything looked at it.
//!
//! [`check_yaml`] walks libyaml's event stream once, in linear time, and stops at the first
//! limit crossed: the file size ([`MAX_YAML_BYTES`]), the nesting depth ([`MAX_DEPTH`]) and
//! the nodes aliases add ([`MAX_ALIAS_NODES`]). Syntax errors are left to the real decoder,
//! which then meets them at the same place, so its message is unchanged.
//!
//! Callers: `berth simulate` for every input file and `--config`, and `berth run` for its
//! `--config`. Objects read from the API server are JSON (`serde_json` is linear and limits
//! depth itself) and their annotation values are bounded by the codecs in [`crate::annotations`].

use std::collections::HashMap;
use std::mem::MaybeUninit;

// `sys` names the raw C-shaped layer as -sys crates do; its unsafety stays inside `Events`
// and `convert` below.
#[allow(clippy::unsafe_removed_from_name)]
use unsafe_libyaml as sys;

/// Largest YAML text berth reads from one file, in bytes. The API server refuses request
/// bodies above 3 MiB, so one object is never near this; a whole cluster dumped as a `List`
/// (`kubectl get -o yaml`, or `berth simulate -o yaml`) of tens of thousands of objects is.
pub const MAX_YAML_BYTES: usize = 64 << 20;

/// Deepest nesting of mappings and sequences berth reads. The deepest field of a Kubernetes
/// object inside a Scenario step inside a `List` is about 20 levels down; the YAML decoder's
/// own recursion limit is 128, but it applies only after libyaml has scanned the whole
/// document, which is where deep nesting is slow.
pub const MAX_DEPTH: usize = 64;

/// Most nodes that aliases (`*name`, including `<<: *name` merges) may add to one file once
/// expanded. Repeating a pod template with an anchor a few thousand times stays far below
/// it; an alias bomb crosses it long before it costs memory.
pub const MAX_ALIAS_NODES: u64 = 1_000_000;

/// Text refused because it crosses one of the limits. Lines and columns are 1-based, as in
/// the YAML decoder's own messages; `document` is the 0-based index of the document in the
/// file, counted as the decoder counts them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The file is larger than [`MAX_YAML_BYTES`].
    #[error("the file is {bytes} bytes; berth reads files of at most {limit} bytes")]
    TooLarge {
        /// Size of the text (or the part read before giving up).
        bytes: usize,
        /// [`MAX_YAML_BYTES`].
        limit: usize,
    },
    /// Mappings and sequences are nested deeper than [`MAX_DEPTH`].
    #[error("nested deeper than {limit} levels at line {line} column {column}; berth reads at most {limit}")]
    TooDeep {
        /// Document index.
        document: usize,
        /// Line of the collection that went one level too deep.
        line: u64,
        /// Its column.
        column: u64,
        /// [`MAX_DEPTH`].
        limit: usize,
    },
    /// Aliases expand to more than [`MAX_ALIAS_NODES`] nodes.
    #[error("aliases expand to more than {limit} nodes at line {line} column {column}; berth expands at most {limit}")]
    AliasExpansion {
        /// Document index.
        document: usize,
        /// Line of the alias that crossed the limit.
        line: u64,
        /// Its column.
        column: u64,
        /// [`MAX_ALIAS_NODES`].
        limit: u64,
    },
    /// An alias names a node that is still open around it, so expanding it never ends.
    #[error("alias *{anchor} at line {line} column {column} refers to a node that contains it")]
    RecursiveAlias {
        /// Document index.
        document: usize,
        /// The anchor name (lossily decoded).
        anchor: String,
        /// Line of the alias.
        line: u64,
        /// Its column.
        column: u64,
    },
}

impl LimitError {
    /// The 0-based index of the document at fault (0 for [`LimitError::TooLarge`]).
    pub fn document(&self) -> usize {
        match self {
            LimitError::TooLarge { .. } => 0,
            LimitError::TooDeep { document, .. }
            | LimitError::AliasExpansion { document, .. }
            | LimitError::RecursiveAlias { document, .. } => *document,
        }
    }
}

/// Checks YAML text against the limits above, in time linear in its size.
///
/// `Ok` does not mean the text is valid YAML: a syntax error ends the walk early and is left
/// for the decoder to report (it stops at the same point, having done no more work).
pub fn check_yaml(text: &str) -> Result<(), LimitError> {
    if text.len() > MAX_YAML_BYTES {
        return Err(LimitError::TooLarge {
            bytes: text.len(),
            limit: MAX_YAML_BYTES,
        });
    }
    let mut events = Events::new(text.as_bytes());
    let mut walk = Walk::default();
    while let Some(event) = events.next() {
        if !walk.event(event)? {
            break;
        }
    }
    Ok(())
}

/// The parts of a libyaml event the limits need.
enum Event {
    DocumentStart,
    Scalar {
        anchor: Option<Vec<u8>>,
    },
    Alias {
        anchor: Vec<u8>,
        mark: Mark,
    },
    CollectionStart {
        anchor: Option<Vec<u8>>,
        mark: Mark,
    },
    CollectionEnd,
    StreamEnd,
    /// Events that change nothing here (stream start, document end).
    Other,
}

/// A 1-based position.
#[derive(Clone, Copy)]
struct Mark {
    line: u64,
    column: u64,
}

impl Mark {
    fn of(mark: &sys::yaml_mark_t) -> Self {
        Self {
            line: mark.line.saturating_add(1),
            column: mark.column.saturating_add(1),
        }
    }
}

/// What an anchor currently names.
#[derive(Clone, Copy)]
enum Anchored {
    /// A collection still open (its frame id): an alias to it would be infinite.
    Open(u64),
    /// A finished node of this many nodes (aliases inside it expanded).
    Done(u64),
}

struct Frame {
    id: u64,
    anchor: Option<Vec<u8>>,
    nodes: u64,
}

/// The state of the walk over one stream.
#[derive(Default)]
struct Walk {
    document: Option<usize>,
    stack: Vec<Frame>,
    anchors: HashMap<Vec<u8>, Anchored>,
    next_id: u64,
    alias_nodes: u64,
}

impl Walk {
    fn document(&self) -> usize {
        self.document.unwrap_or(0)
    }

    /// Counts `nodes` more nodes in the innermost open collection.
    fn add(&mut self, nodes: u64) {
        if let Some(top) = self.stack.last_mut() {
            top.nodes = top.nodes.saturating_add(nodes);
        }
    }

    /// Takes one event; `Ok(false)` at the end of the stream.
    fn event(&mut self, event: Event) -> Result<bool, LimitError> {
        match event {
            Event::StreamEnd => return Ok(false),
            Event::Other => {}
            Event::DocumentStart => {
                // Anchors are scoped to their document, as in the decoder.
                self.document = Some(self.document.map_or(0, |d| d + 1));
                self.anchors.clear();
                self.stack.clear();
            }
            Event::Scalar { anchor } => {
                if let Some(anchor) = anchor {
                    self.anchors.insert(anchor, Anchored::Done(1));
                }
                self.add(1);
            }
            Event::Alias { anchor, mark } => {
                let nodes = match self.anchors.get(&anchor) {
                    Some(Anchored::Done(nodes)) => *nodes,
                    Some(Anchored::Open(_)) => {
                        return Err(LimitError::RecursiveAlias {
                            document: self.document(),
                            anchor: String::from_utf8_lossy(&anchor).into_owned(),
                            line: mark.line,
                            column: mark.column,
                        })
                    }
                    // An unknown anchor is the decoder's error to report.
                    None => 1,
                };
                self.alias_nodes = self.alias_nodes.saturating_add(nodes);
                if self.alias_nodes > MAX_ALIAS_NODES {
                    return Err(LimitError::AliasExpansion {
                        document: self.document(),
                        line: mark.line,
                        column: mark.column,
                        limit: MAX_ALIAS_NODES,
                    });
                }
                self.add(nodes);
            }
            Event::CollectionStart { anchor, mark } => {
                if self.stack.len() >= MAX_DEPTH {
                    return Err(LimitError::TooDeep {
                        document: self.document(),
                        line: mark.line,
                        column: mark.column,
                        limit: MAX_DEPTH,
                    });
                }
                let id = self.next_id;
                self.next_id += 1;
                if let Some(anchor) = &anchor {
                    self.anchors.insert(anchor.clone(), Anchored::Open(id));
                }
                self.stack.push(Frame {
                    id,
                    anchor,
                    nodes: 1,
                });
            }
            Event::CollectionEnd => {
                if let Some(frame) = self.stack.pop() {
                    if let Some(anchor) = frame.anchor {
                        // Only if no node inside took the same name since.
                        if let Some(entry) = self.anchors.get_mut(&anchor) {
                            if matches!(entry, Anchored::Open(id) if *id == frame.id) {
                                *entry = Anchored::Done(frame.nodes);
                            }
                        }
                    }
                    self.add(frame.nodes);
                }
            }
        }
        Ok(true)
    }
}

/// libyaml's event parser over a borrowed text: the same scanner and parser the decoder
/// uses, so both agree on every event.
struct Events<'a> {
    parser: Box<MaybeUninit<sys::yaml_parser_t>>,
    /// Whether `yaml_parser_initialize` succeeded (so the parser must be deleted).
    initialized: bool,
    /// Set once libyaml reported an error or the stream ended: no event follows.
    done: bool,
    _input: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Events<'a> {
    fn new(input: &'a [u8]) -> Self {
        let mut parser = Box::new(MaybeUninit::<sys::yaml_parser_t>::uninit());
        let ptr = parser.as_mut_ptr();
        // SAFETY: `ptr` points to writable memory for a parser; `yaml_parser_initialize`
        // zeroes and sets it up (it fails only when malloc does, and then leaves nothing to
        // free). The input slice outlives the parser: `Events` borrows it for `'a`, and the
        // parser is boxed so its address does not change while libyaml holds pointers into it.
        let ok = unsafe {
            if sys::yaml_parser_initialize(ptr).fail {
                false
            } else {
                sys::yaml_parser_set_encoding(ptr, sys::YAML_UTF8_ENCODING);
                sys::yaml_parser_set_input_string(ptr, input.as_ptr(), input.len() as u64);
                true
            }
        };
        Self {
            parser,
            initialized: ok,
            // Out of memory already: check nothing and let the decoder fail the same way.
            done: !ok,
            _input: std::marker::PhantomData,
        }
    }

    /// The next event, or `None` at the end of the stream or at a syntax error.
    fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        let parser = self.parser.as_mut_ptr();
        let mut raw = MaybeUninit::<sys::yaml_event_t>::uninit();
        let raw = raw.as_mut_ptr();
        // SAFETY: the parser was initialized in `new` (`done` is false) and has not reported
        // an error yet; on success `yaml_parser_parse` fills `raw`, whose pointers stay valid
        // until `yaml_event_delete`, which runs before returning.
        unsafe {
            if sys::yaml_parser_parse(parser, raw).fail {
                self.done = true;
                return None;
            }
            let event = convert(&*raw);
            sys::yaml_event_delete(raw);
            if matches!(event, Event::StreamEnd) {
                self.done = true;
            }
            Some(event)
        }
    }
}

impl Drop for Events<'_> {
    fn drop(&mut self) {
        if self.initialized {
            // SAFETY: initialized in `new` and not deleted before; nothing uses it after.
            unsafe { sys::yaml_parser_delete(self.parser.as_mut_ptr()) }
        }
    }
}

/// Copies what the walk needs out of a libyaml event.
///
/// # Safety
/// `raw` must be an event filled by a successful `yaml_parser_parse` and not yet deleted.
unsafe fn convert(raw: &sys::yaml_event_t) -> Event {
    let mark = Mark::of(&raw.start_mark);
    // SAFETY (for every union read below): libyaml fills the union member named by `type_`.
    unsafe {
        match raw.type_ {
            sys::YAML_STREAM_END_EVENT => Event::StreamEnd,
            sys::YAML_DOCUMENT_START_EVENT => Event::DocumentStart,
            sys::YAML_SCALAR_EVENT => Event::Scalar {
                anchor: anchor(raw.data.scalar.anchor),
            },
            sys::YAML_ALIAS_EVENT => Event::Alias {
                anchor: anchor(raw.data.alias.anchor).unwrap_or_default(),
                mark,
            },
            sys::YAML_SEQUENCE_START_EVENT => Event::CollectionStart {
                anchor: anchor(raw.data.sequence_start.anchor),
                mark,
            },
            sys::YAML_MAPPING_START_EVENT => Event::CollectionStart {
                anchor: anchor(raw.data.mapping_start.anchor),
                mark,
            },
            sys::YAML_SEQUENCE_END_EVENT | sys::YAML_MAPPING_END_EVENT => Event::CollectionEnd,
            _ => Event::Other,
        }
    }
}

/// Copies a NUL-terminated anchor name.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string owned by a live event.
unsafe fn anchor(ptr: *const u8) -> Option<Vec<u8>> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated, as the caller guarantees.
    let name = unsafe { std::ffi::CStr::from_ptr(ptr.cast()) };
    Some(name.to_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_documents_pass() {
        for text in [
            "",
            "a: 1\n",
            "---\n---\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}}\nspec: {containers: [{name: c}]}\n",
            "base: &pod {cpu: 1}\npods:\n- <<: *pod\n  name: a\n- <<: *pod\n  name: b\n",
            "a: [unclosed\n",
            "a: *nowhere\n",
        ] {
            assert_eq!(check_yaml(text), Ok(()), "{text:?}");
        }
    }

    #[test]
    fn nesting_is_limited_in_flow_and_block_style() {
        let flow = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = check_yaml(&flow).expect_err("too deep");
        assert_eq!(
            err.to_string(),
            "nested deeper than 64 levels at line 1 column 65; berth reads at most 64"
        );
        let at_limit = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(check_yaml(&at_limit), Ok(()));
        let block: String = (0..MAX_DEPTH + 1)
            .map(|d| format!("{}k:\n", " ".repeat(d)))
            .collect();
        let err = check_yaml(&block).expect_err("too deep");
        assert!(matches!(err, LimitError::TooDeep { line: 65, .. }), "{err}");
    }

    #[test]
    fn alias_bombs_are_refused_before_expansion() {
        let text = format!(
            "a: &x [{}]\nb: [{}]\n",
            vec!["1"; 10_000].join(","),
            vec!["*x"; 10_000].join(",")
        );
        let err = check_yaml(&text).expect_err("bomb");
        assert!(
            matches!(err, LimitError::AliasExpansion { line: 2, .. }),
            "{err}"
        );
        // Nested doubling: each level doubles the one below.
        let mut text = String::from("l0: &l0 [1, 1]\n");
        for i in 1..40 {
            text.push_str(&format!("l{i}: &l{i} [*l{}, *l{}]\n", i - 1, i - 1));
        }
        assert!(matches!(
            check_yaml(&text),
            Err(LimitError::AliasExpansion { .. })
        ));
    }

    #[test]
    fn an_alias_inside_its_own_anchor_is_refused() {
        let err = check_yaml("a: &x [1, *x]\n").expect_err("recursive");
        assert_eq!(
            err.to_string(),
            "alias *x at line 1 column 11 refers to a node that contains it"
        );
        // A node inside that reuses the name shadows the open one.
        assert_eq!(check_yaml("a: &x [&x 1, *x]\n"), Ok(()));
    }

    #[test]
    fn documents_are_counted_and_anchors_scoped_to_them() {
        let text = format!("a: 1\n---\nb: 2\n---\n{}\n", "[".repeat(70));
        let err = check_yaml(&text).expect_err("too deep");
        assert_eq!(err.document(), 2);
        // `*x` in the second document does not see the first one's anchor.
        assert_eq!(check_yaml("a: &x [1]\n---\nb: *x\n"), Ok(()));
    }

    #[test]
    fn size_is_limited() {
        let text = " ".repeat(MAX_YAML_BYTES + 1);
        assert!(matches!(
            check_yaml(&text),
            Err(LimitError::TooLarge { .. })
        ));
    }
}
