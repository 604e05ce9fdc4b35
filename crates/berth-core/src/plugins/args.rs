//! Decoding plugin args from configuration.

use serde::de::DeserializeOwned;

use crate::framework::config::ConfigError;

/// Decodes `args` (or the type's default when absent) into `T`, naming the bad field.
pub fn decode<T: DeserializeOwned + Default>(
    args: Option<&serde_json::Value>,
) -> Result<T, ConfigError> {
    match args {
        None => Ok(T::default()),
        Some(v) => {
            let mut v = v.clone();
            if let Some(obj) = v.as_object_mut() {
                // `apiVersion`/`kind` of typed args are accepted and ignored.
                obj.remove("apiVersion");
                obj.remove("kind");
            }
            serde_json::from_value(v).map_err(|e| ConfigError::new("", e.to_string()))
        }
    }
}
