//! Where accepted data goes. Today: InfluxDB line protocol over HTTP. Another sink gets a module
//! here and its own writer task with the same "complete only when durable" contract.

pub mod influx;
