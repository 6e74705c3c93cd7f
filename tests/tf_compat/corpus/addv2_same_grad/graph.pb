
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

AddV2AddV2xy*
T0
d
dy0Const*
dtype0*I
value@B>"0zËÇ¿ÉV§¿i»‡¿Ú]h¾	’U>?°¿…9J¾Å…=ırG½SH_?sÃì¾ìû¿
G
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@AddV2
-
dx0Identitygradients/grad_ys_0*
T0
-
dx1Identitygradients/grad_ys_0*
T0"ª