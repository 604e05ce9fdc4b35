pub mod fingerprint;
pub mod policy;
pub mod types;
