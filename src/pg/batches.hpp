// The arrays that the batch functions take (idem_try_insert_many,
// idem_advance_many): one dimension, 1 to max_batch elements, none NULL
// (the callers check their elements in order, so that an error names the
// first bad one, whatever is wrong with it).
// Include after postgres.h.
#pragma once

extern "C" {
#include "utils/array.h"
}

namespace idem
{

// The most elements one batch may have (docs/reference/records.md).
constexpr int max_batch = 10000;

// The elements of `array`, whose type is `element_type`, into *elements
// and *nulls; returns how many there are. Errors for an array that is not
// a batch (22023, 54000) name `fn` and the argument, `what`.
int batch_elements(const char *fn, const char *what, ArrayType *array, Oid element_type,
                   Datum **elements, bool **nulls);

// The error for a NULL element, the i-th (from 0) of `what` (22004).
void batch_null_element(const char *fn, const char *what, int i);

} // namespace idem
