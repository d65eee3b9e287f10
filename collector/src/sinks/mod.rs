//! Where accepted data goes: InfluxDB line protocol over HTTP (`influx`, always required), and
//! OTLP metrics (`otlp`, optional or required per collector). Another sink gets a module here and
//! its own writer task with the same "complete only when durable" contract.

pub mod influx;
pub mod otlp;
