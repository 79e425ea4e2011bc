//! `sqlx::migrate!` embeds `migrations/` at compile time; without this, a migration added
//! since the last build would be left out of the binary until some Rust file changed.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
