
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
SubSubxy*
T0
d
dy0Const*
dtype0*I
value@B>"0b]P?¯^¾¿@^o¿¾	¾<*‘¾
*?–\O?áC;bÎ‡¿1y?Á”¿«”>
E
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Sub
S
gradients/Sub_grad/NegNeggradients/grad_ys_0*
T0*
_class

loc:@Sub
-
dx0Identitygradients/grad_ys_0*
T0
0
dx1Identitygradients/Sub_grad/Neg*
T0"ª