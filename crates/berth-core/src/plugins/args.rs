//! Decoding plugin args from configuration.

use serde::de::DeserializeOwned;

use crate::framework::config::ConfigError;

/// Decodes `args` (or the type's default when absent) into `T`. A decoding error names the
/// bad field relative to the args object (`scoringStrategy.resources[0].weight`; empty when
/// the args as a whole are wrong), so that the profile can put it under
/// `pluginConfig[i].args`.
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
            serde_path_to_error::deserialize(v).map_err(|e| {
                let path = e.path().to_string();
                // The root's path prints as ".".
                let field = if path == "." { String::new() } else { path };
                ConfigError::new(field, e.into_inner().to_string())
            })
        }
    }
}
