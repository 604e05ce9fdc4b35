//! Tests of explain.
