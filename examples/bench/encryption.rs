//! What encryption at rest costs: enqueue (one job per transaction) and processing (4
//! handler threads) of 1 KiB payloads, encrypted against plain, in alternating rounds of the
//! same run, each figure the median of its rounds. The handler reads its payload (decrypted
//! for the encrypted jobs) and stores no result.
//!
//! A third kind, `padded`, is a plain payload as long as the envelope of the encrypted one
//! (base64 and the envelope's fields make it about 40 % longer): what the stored size alone
//! costs, apart from the cipher.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use litejobs::encryption::Keyring;
use litejobs::{JobContext, JobError, NewJob, Queue, Synchronous, Worker};
use serde_json::{json, Value};

use super::{discard, drain_rate, insert_medians, median, ratio, Config, Res};

/// A fixed key: the bench measures cost, not secrecy.
const KEY: &str = "bench:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn open(path: &Path, sync: Synchronous, encrypted: bool) -> Res<Queue> {
    let builder = Queue::builder().synchronous(sync);
    let builder = if encrypted {
        builder.encryption_keys(Keyring::parse(KEY)?)
    } else {
        builder
    };
    Ok(builder.open(path)?)
}

/// Which payloads a figure is of.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Plain,
    Encrypted,
    /// Plain, as long as the encrypted one's envelope.
    Padded,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Encrypted => "encrypted",
            Kind::Padded => "padded",
        }
    }
}

/// The envelope of `plain_bytes` of JSON text under the key `bench`, in bytes.
fn envelope_bytes(plain_bytes: usize) -> usize {
    let fields = r#"{"litejobs_envelope":1,"alg":"A256GCMSIV","key":"bench","nonce":"0123456789abcdef","data":""}"#;
    fields.len() + (plain_bytes + 16).div_ceil(3) * 4
}

/// A job with a payload of 1 KiB of JSON text (for `Padded`, as long as the envelope).
fn job(i: usize, kind: Kind) -> NewJob {
    let text = |len: usize| -> String {
        (0..len)
            .map(|k| char::from(b'a' + ((i + k) % 26) as u8))
            .collect()
    };
    let payload = json!({ "i": i, "text": text(1000) });
    match kind {
        Kind::Plain => NewJob::new("charge", payload),
        Kind::Encrypted => NewJob::new("charge", payload).encrypted(),
        Kind::Padded => {
            let grow = envelope_bytes(payload.to_string().len()) - payload.to_string().len();
            NewJob::new(
                "charge",
                json!({ "i": i, "text": text(1000), "pad": text(grow - 9) }),
            )
        }
    }
}

fn enqueue_single(path: &Path, sync: Synchronous, n: usize, kind: Kind) -> Res<f64> {
    let q = open(path, sync, kind == Kind::Encrypted)?;
    let t = Instant::now();
    for i in 0..n {
        q.enqueue(job(i, kind))?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn process(path: &Path, sync: Synchronous, n: usize, kind: Kind) -> Res<f64> {
    let q = open(path, sync, kind == Kind::Encrypted)?;
    let mut i = 0;
    while i < n {
        q.enqueue_batch((i..(i + 1000).min(n)).map(|i| job(i, kind)).collect())?;
        i += 1000;
    }
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let worker = Worker::builder(&q)
        .handler("charge", move |ctx: &JobContext| -> Result<(), JobError> {
            if ctx.payload()["text"].as_str().map_or(0, str::len) != 1000 {
                return Err(JobError::permanent("the payload did not arrive whole"));
            }
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .concurrency(4);
    drain_rate(&q, n, &done, worker)
}

/// The encryption figures, with their rounds and ratios (encrypted ÷ plain).
pub(crate) fn figures(c: &Config, sync: Synchronous, dir: &Path) -> Res<BTreeMap<String, Value>> {
    let mut rounds = BTreeMap::<String, Vec<f64>>::new();
    let mut n = 0;
    for _ in 0..c.rounds {
        for kind in [Kind::Plain, Kind::Encrypted, Kind::Padded] {
            let name = kind.name();
            n += 1;
            let path = dir.join(format!("enc-{n:02}-single-{name}.db"));
            let rate = enqueue_single(&path, sync, c.single, kind)?;
            rounds
                .entry(format!("enqueue_single_1kib_{name}_per_s"))
                .or_default()
                .push(rate);
            discard(&path);
            let path = dir.join(format!("enc-{n:02}-process-{name}.db"));
            let rate = process(&path, sync, c.process, kind)?;
            rounds
                .entry(format!("process_4_threads_1kib_{name}_per_s"))
                .or_default()
                .push(rate);
            discard(&path);
        }
    }
    let mut f = BTreeMap::new();
    insert_medians(&mut f, &rounds);
    let get = |what: &str, kind: &str| median(&rounds[&format!("{what}_{kind}_per_s")]);
    for what in ["enqueue_single_1kib", "process_4_threads_1kib"] {
        f.insert(
            format!("ratio_{what}_encrypted_to_plain"),
            ratio(get(what, "encrypted"), get(what, "plain")),
        );
    }
    for what in ["enqueue_single_1kib", "process_4_threads_1kib"] {
        f.insert(
            format!("ratio_{what}_encrypted_to_padded"),
            ratio(get(what, "encrypted"), get(what, "padded")),
        );
    }
    Ok(f)
}

/// The figures' lines of the table.
pub(crate) fn print(figures: &serde_json::Map<String, Value>) {
    if !figures.contains_key("enqueue_single_1kib_plain_per_s") {
        return;
    }
    println!(
        "  {:<44} {:>12} {:>12} {:>7}",
        "1 KiB payloads", "encrypted", "plain", "ratio"
    );
    for (label, what) in [
        ("enqueue, 1 per transaction (jobs/s)", "enqueue_single_1kib"),
        ("process, 4 threads (jobs/s)", "process_4_threads_1kib"),
    ] {
        let get = |kind: &str| {
            figures
                .get(&format!("{what}_{kind}_per_s"))
                .and_then(Value::as_f64)
                .unwrap_or(f64::NAN)
        };
        let (a, b) = (get("encrypted"), get("plain"));
        println!("  {label:<44} {a:>12.0} {b:>12.0} {:>7.2}", a / b);
    }
    println!("  plain payloads as long as the envelope (the stored size alone):");
    for (label, what) in [
        ("enqueue, padded (jobs/s)", "enqueue_single_1kib"),
        (
            "process, 4 threads, padded (jobs/s)",
            "process_4_threads_1kib",
        ),
    ] {
        if let Some(padded) = figures
            .get(&format!("{what}_padded_per_s"))
            .and_then(Value::as_f64)
        {
            println!("  {label:<44} {padded:>12.0}");
        }
    }
}
