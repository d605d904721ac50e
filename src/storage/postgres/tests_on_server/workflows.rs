//! Unit tests of [`WorkflowStore`] on PostgreSQL: rows, steps with their waits, listings
//! with counts, named steps, a step's dependencies, closing a batch.

use super::{Pg, NOW};
use crate::storage::workflows::{WorkflowRow, WorkflowStore};

#[test]
fn a_workflow_reads_back_with_its_steps_and_their_waits() {
    let Some(mut pg) = Pg::new() else { return };
    let id = pg
        .write(|tx| tx.create_workflow("workflow", "order 1042", false, NOW))
        .expect("create");
    let (charge, ship, old_ship, loose) = (pg.job(), pg.job(), pg.job(), pg.job());
    pg.write(|tx| {
        tx.place_in_workflow(charge, id, Some("charge"))?;
        tx.place_in_workflow(old_ship, id, Some("ship"))?;
        tx.place_in_workflow(ship, id, Some("ship"))
    })
    .expect("place");
    pg.add(&[(ship, charge, false), (old_ship, charge, true)], NOW)
        .expect("waits");
    pg.exec(&format!(
        "UPDATE jobs SET status = 'succeeded', result = '{{\"paid\": 1}}', finished_at = {NOW}
         WHERE id = {charge}"
    ));
    assert_eq!(
        pg.write(|tx| tx.workflow(id)).expect("read"),
        Some(WorkflowRow {
            id,
            kind: "workflow".into(),
            name: "order 1042".into(),
            open: false,
            created_at: NOW,
            closed_at: None,
        })
    );
    let steps = pg.write(|tx| tx.workflow_steps(id)).expect("steps");
    let shown: Vec<(i64, Option<&str>, &str)> = steps
        .iter()
        .map(|s| (s.id, s.step.as_deref(), s.status.as_str()))
        .collect();
    assert_eq!(
        shown,
        vec![
            (charge, Some("charge"), "succeeded"),
            (ship, Some("ship"), "queued"),
            (old_ship, Some("ship"), "queued")
        ],
        "job {loose} is in no workflow"
    );
    assert_eq!(
        steps[1].depends_on,
        vec![(charge, false, "done".to_string())]
    );
    assert_eq!(
        steps[2].depends_on,
        vec![(charge, true, "done".to_string())]
    );
    assert_eq!(steps[1].job_type, "t");
    // The latest job of a name; names it does not have are left out; in the order asked.
    let named = pg
        .write(|tx| {
            tx.steps_by_name(
                id,
                &["ship".to_string(), "nope".to_string(), "charge".to_string()],
            )
        })
        .expect("by name");
    assert_eq!(
        named,
        vec![
            ("ship".to_string(), old_ship),
            ("charge".to_string(), charge)
        ]
    );
    let deps = pg.write(|tx| tx.dependencies_of(ship)).expect("deps");
    assert_eq!(deps.len(), 1);
    assert_eq!(
        (
            deps[0].id,
            deps[0].status.as_str(),
            deps[0].result.as_deref()
        ),
        (charge, "succeeded", Some("{\"paid\": 1}"))
    );
    assert!(!deps[0].any_outcome);
    assert!(pg
        .write(|tx| tx.pending_dependants_of(charge))
        .expect("pending")
        .is_empty());
}

#[test]
fn listings_come_newest_first_with_counts_and_batches_close_once() {
    let Some(mut pg) = Pg::new() else { return };
    let first = pg
        .write(|tx| tx.create_workflow("workflow", "a", false, NOW))
        .expect("create");
    let batch = pg
        .write(|tx| tx.create_workflow("batch", "b", true, NOW + 1))
        .expect("create");
    let (m1, m2, m3, waiting) = (pg.job(), pg.job(), pg.job(), pg.job());
    pg.write(|tx| {
        for m in [m1, m2, m3] {
            tx.place_in_workflow(m, batch, None)?;
        }
        tx.place_in_workflow(waiting, first, Some("later"))
    })
    .expect("place");
    pg.end(m1, "succeeded", NOW + 2);
    pg.end(m2, "dead", NOW + 2);
    pg.add(&[(waiting, m3, false)], NOW).expect("wait");
    assert_eq!(
        pg.write(|tx| tx.pending_dependants_of(m3))
            .expect("pending"),
        vec![waiting]
    );
    let listed = pg.write(|tx| tx.workflows(10, None)).expect("list");
    assert_eq!(
        listed.iter().map(|w| w.row.id).collect::<Vec<_>>(),
        vec![batch, first]
    );
    assert!(listed[0].row.open);
    assert_eq!(
        listed[0].counts,
        vec![
            ("dead".to_string(), 1),
            ("queued".to_string(), 1),
            ("succeeded".to_string(), 1)
        ]
    );
    assert_eq!(listed[1].counts, vec![("queued".to_string(), 1)]);
    let older = pg.write(|tx| tx.workflows(10, Some(batch))).expect("page");
    assert_eq!(
        older.iter().map(|w| w.row.id).collect::<Vec<_>>(),
        vec![first]
    );
    assert!(pg
        .write(|tx| tx.close_batch(batch, NOW + 5))
        .expect("close"));
    assert!(!pg
        .write(|tx| tx.close_batch(batch, NOW + 6))
        .expect("again"));
    assert!(!pg
        .write(|tx| tx.close_batch(first, NOW + 6))
        .expect("a workflow"));
    let closed = pg
        .write(|tx| tx.workflow(batch))
        .expect("read")
        .expect("row");
    assert_eq!((closed.open, closed.closed_at), (false, Some(NOW + 5)));
}
