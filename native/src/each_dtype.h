/* each_dtype.h - instantiates the template header named by DTYPE_TEMPLATE
   once per storage type: float32, float64, int64, int32 and uint8 (bool is
   stored as uint8 and shares its kernels), with T (the element type) and
   S(name) (the dtype suffix) defined first; each template undefines them at
   its end. A template with other parameters (an accumulator type, a libm
   function) or other dtypes is instantiated by hand, as reduce.c and gemm.c
   do. No include guard: it is included once per template. */
#define T float
#define S(name) name##_f32
#include DTYPE_TEMPLATE

#define T double
#define S(name) name##_f64
#include DTYPE_TEMPLATE

#define T int64_t
#define S(name) name##_i64
#include DTYPE_TEMPLATE

#define T int32_t
#define S(name) name##_i32
#include DTYPE_TEMPLATE

#define T uint8_t
#define S(name) name##_u8
#include DTYPE_TEMPLATE

#undef DTYPE_TEMPLATE
