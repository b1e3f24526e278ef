//! Ferrule benchmark helpers: route tables and traffic shared by the benchmarks.

pub mod routes;
