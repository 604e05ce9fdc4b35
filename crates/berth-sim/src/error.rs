//! What makes `berth simulate` refuse to run: bad input (exit status 2).
//!
//! Every variant is something the user must fix in a file; none is retryable. The message
//! names the file and, for documents, the 0-based document index and the field path, so it
//! can be found without reading the simulator's source.

use std::fmt;

/// An input document the API server would reject (unparsable YAML, an unknown kind, a schema
/// violation, an unparsable quantity, a bad duration, a priority class that does not exist).
///
/// Displayed as `pods.yaml: document 3: spec.containers[0].resources.requests.cpu: ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InputError {
    /// The file as named on the command line (`<stdin>` for `-`).
    pub file: String,
    /// The 0-based index of the document in its file (empty documents count).
    pub doc: usize,
    /// The JSON path of the offending field (`spec.steps[2].advance`), empty when the whole
    /// document is at fault.
    pub field: String,
    /// What is wrong, worded like the API server's field errors where there is one.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}: ", self.file, self.doc)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// A problem inside one document, before the file and document index are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl FieldError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Prefixes the field path (`spec.steps[0].apply[1]` + `.metadata.name`).
    pub(crate) fn within(mut self, prefix: &str) -> Self {
        if prefix.is_empty() {
            return self;
        }
        self.field = if self.field.is_empty() {
            prefix.to_string()
        } else if self.field.starts_with('[') {
            format!("{prefix}{}", self.field)
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }

    pub(crate) fn at(self, file: &str, doc: usize) -> InputError {
        InputError {
            file: file.to_string(),
            doc,
            field: self.field,
            message: self.message,
        }
    }
}

/// Why `berth simulate` could not run. All variants are bad input (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A document is invalid.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A file could not be read.
    #[error("{file}: {source}")]
    Read {
        /// The file.
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The input holds no object and no Scenario (empty files, or only comments and `---`):
    /// most likely the wrong file, so it is refused rather than simulated as nothing.
    #[error("{files}: no objects to simulate: the input is empty (berth simulate reads multi-document YAML of Nodes, Pods, Reservations, ... and at most one Scenario; the format is described in docs/scenario-format.md)")]
    Empty {
        /// The files as named on the command line, comma-separated.
        files: String,
    },
    /// The `--config` file is not a usable `KubeSchedulerConfiguration` (unparsable,
    /// unknown plugin, invalid args).
    #[error("{file}: {}{message}", field_prefix(field))]
    Config {
        /// The configuration file.
        file: String,
        /// The field path inside it (`profiles[0].pluginConfig[1].args`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl Error {
    /// The exit status `berth simulate` uses for this error (always 2: bad input).
    pub fn exit_code(&self) -> i32 {
        2
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_error_names_file_document_and_field() {
        let e = FieldError::new("cpu", "bad")
            .within("spec.containers[0].resources.requests")
            .at("pods.yaml", 3);
        assert_eq!(
            e.to_string(),
            "pods.yaml: document 3: spec.containers[0].resources.requests.cpu: bad"
        );
    }

    #[test]
    fn an_index_path_joins_without_a_dot() {
        let e = FieldError::new("[2].name", "x").within("items");
        assert_eq!(e.field, "items[2].name");
    }

    #[test]
    fn a_whole_document_error_has_no_field() {
        let e = FieldError::new("", "not a mapping").at("a.yaml", 0);
        assert_eq!(e.to_string(), "a.yaml: document 0: not a mapping");
    }
}
