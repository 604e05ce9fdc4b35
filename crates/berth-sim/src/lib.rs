
pub mod bench;
