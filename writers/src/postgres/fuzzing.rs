//! Entry points for the fuzz targets in `writers/fuzz`; not an API.

use arrow_array::ArrayRef;
use arrow_schema::Field;

use super::defaults::column_default;
use super::encode::Enc;
use super::types::column_type;

/// Every row of `array` (a column of `field`) through the replica's binary COPY encoder, as
/// the replica writes it, for a PostgreSQL source and any other: the column's type, its
/// default, the TOAST placeholder check and each value. Values the type map refuses are errors,
/// never panics; the first is returned.
pub fn encode_column(field: &Field, array: &ArrayRef) -> Result<usize, String> {
    let mut written = 0;
    for postgres in [false, true] {
        let ty = column_type(field, postgres)?;
        let _ = column_default(field, &ty);
        let enc = Enc::new(array, &ty)?;
        let mut out = Vec::new();
        let mut first = None;
        let may = enc.may_hold_placeholder();
        for i in 0..array.len() {
            if may {
                let _ = enc.is_placeholder(i);
            }
            if let Err(e) = enc.write(i, &mut out) {
                first.get_or_insert(e);
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
        written += out.len();
    }
    Ok(written)
}
