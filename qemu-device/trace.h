#include "trace/trace-hw_misc_qhca.h"
