// Checks and deconstructs a batch function's array (batches.hpp).
extern "C" {
#include "postgres.h"

#include "utils/lsyscache.h"
}

#include "pg/batches.hpp"

namespace idem
{

int batch_elements(const char *fn, const char *what, ArrayType *array, Oid element_type,
                   Datum **elements, bool **nulls)
{
	if (ARR_NDIM(array) > 1)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: %s must be a one-dimensional array", fn, what));
	int given = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
	if (given == 0)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: %s must not be empty", fn, what));
	if (given > max_batch)
		ereport(ERROR, errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
		        errmsg("%s: too many %s in one batch", fn, what),
		        errdetail("The batch has %d %s; the limit is %d.", given, what, max_batch),
		        errhint("Split the batch."));
	int16 typlen;
	bool typbyval;
	char typalign;
	get_typlenbyvalalign(element_type, &typlen, &typbyval, &typalign);
	int n;
	deconstruct_array(array, element_type, typlen, typbyval, typalign, elements, nulls, &n);
	return n;
}

void batch_null_element(const char *fn, const char *what, int i)
{
	ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
	        errmsg("%s: %s must not contain null", fn, what),
	        errdetail("Element %d of the batch is null.", i + 1));
}

} // namespace idem
