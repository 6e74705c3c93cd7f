
2
aPlaceholder*
dtype0*
shape
:
2
bPlaceholder*
dtype0*
shape
:
2
cPlaceholder*
dtype0*
shape
:
'
AddNAddNabc*
N*
T0
L
dy0Const*
dtype0*1
value(B&"êð>‰ž¿ÿDÎ=³”@W2—¿93×¾
F
gradients/grad_ys_0Identitydy0*
T0*
_class
	loc:@AddN
-
dx0Identitygradients/grad_ys_0*
T0
-
dx1Identitygradients/grad_ys_0*
T0
-
dx2Identitygradients/grad_ys_0*
T0"ª