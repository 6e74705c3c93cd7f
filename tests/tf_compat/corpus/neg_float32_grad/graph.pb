
2
xPlaceholder*
dtype0*
shape
:

NegNegx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<À³?‹=U€?@Œ_>ëÈ…?W×´¿XF¬?&5Å¾™\l?çDë¾@¸¶¿	Y’?¹u¢?4˜?(ËÓ¿
E
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Neg
S
gradients/Neg_grad/NegNeggradients/grad_ys_0*
T0*
_class

loc:@Neg
0
dx0Identitygradients/Neg_grad/Neg*
T0"ª