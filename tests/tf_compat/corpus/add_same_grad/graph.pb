
2
xPlaceholder*
dtype0*
shape
:
2
yPlaceholder*
dtype0*
shape
:

AddAddxy*
T0
d
dy0Const*
dtype0*I
value@B>"0òL8>H½W¾i˜Í=;®?\<&¿ˆÎ¿›‡¸¿fÚ³?ĞÃŠ>@&?`U¿
E
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Add
-
dx0Identitygradients/grad_ys_0*
T0
-
dx1Identitygradients/grad_ys_0*
T0"ª