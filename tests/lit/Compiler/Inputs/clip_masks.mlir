// Clip as dtcc imports it, its mask written out, and a mask read in
// (tests/lit/Compiler/fuse_masks.test).
func.func @main(%x: tensor<16x64xf32> {dgraph.name = "x"}, %keep: tensor<16x64xi1> {dgraph.name = "keep"}) -> (tensor<16x64xf32> {dgraph.name = "y"}, tensor<16x64xi1> {dgraph.name = "inside"}) {
  %lo = dgraph.constant dense<-1.0> : tensor<16x64xf32>
  %hi = dgraph.constant dense<1.5> : tensor<16x64xf32>
  %zero = dgraph.constant dense<0.0> : tensor<16x64xf32>
  %mx = dgraph.max %x, %lo : tensor<16x64xf32>
  %mn = dgraph.min %mx, %hi : tensor<16x64xf32>
  %ge = dgraph.ge %x, %lo : tensor<16x64xf32>
  %le = dgraph.le %x, %hi : tensor<16x64xf32>
  %in = dgraph.and %ge, %le : tensor<16x64xi1>
  %clip = dgraph.select %in, %x, %mn : tensor<16x64xf32>
  %out = dgraph.not %in : tensor<16x64xi1>
  %m = dgraph.or %out, %keep : tensor<16x64xi1>
  %y = dgraph.select %m, %clip, %zero : tensor<16x64xf32>
  return %y, %in : tensor<16x64xf32>, tensor<16x64xi1>
}
