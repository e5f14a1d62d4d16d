//! Starting and stopping the servers under test: a free port on 127.0.0.1, a fresh
//! temporary data directory, readiness, and a kill on drop.
