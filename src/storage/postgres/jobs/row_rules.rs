//! The claimed-row rules on PostgreSQL: the claim's `RETURNING` list, read into the values
//! [`check_claimed`] judges. The schema's CHECK rules already refuse most odd values here;
//! the check stays for a schema whose rules someone dropped, so that such a row gets the
//! verdict and the message it would get on SQLite.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;

use crate::storage::jobs::row_rules::{check_claimed, ClaimedValues, RawValue};
use crate::storage::jobs::ClaimedRow;

/// A row of the claim's `RETURNING` list.
#[derive(QueryableByName, Debug)]
pub(super) struct ClaimRow {
    #[diesel(sql_type = BigInt)]
    pub(super) id: i64,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    payload: String,
    #[diesel(sql_type = BigInt)]
    pub(super) priority: i64,
    #[diesel(sql_type = BigInt)]
    pub(super) run_at: i64,
    /// As the row held them before this claim.
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    max_attempts: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    timeout_ms: Option<i64>,
    #[diesel(sql_type = BigInt)]
    locked_until: i64,
    #[diesel(sql_type = Nullable<Text>)]
    idempotency_key: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    group_key: Option<String>,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    expires_at: Option<i64>,
}

impl ClaimRow {
    /// The claimed row, with a defect when its values break a claimed-row rule.
    pub(super) fn checked(&self, max_payload_bytes: usize) -> ClaimedRow {
        let values = ClaimedValues {
            id: self.id,
            queue: RawValue::Text(self.queue.as_bytes()),
            job_type: RawValue::Text(self.job_type.as_bytes()),
            payload: RawValue::Text(self.payload.as_bytes()),
            priority: RawValue::Integer(self.priority),
            run_at: RawValue::Integer(self.run_at),
            attempts: RawValue::Integer(self.attempts),
            max_attempts: RawValue::Integer(self.max_attempts),
            timeout_ms: RawValue::opt_int(self.timeout_ms),
            locked_until: RawValue::Integer(self.locked_until),
            idempotency_key: RawValue::opt_text(self.idempotency_key.as_deref()),
            group_key: RawValue::opt_text(self.group_key.as_deref()),
            created_at: RawValue::Integer(self.created_at),
            expires_at: RawValue::opt_int(self.expires_at),
        };
        check_claimed(&values, max_payload_bytes)
    }
}
