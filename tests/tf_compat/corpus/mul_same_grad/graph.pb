
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
MulMulxy*
T0
d
dy0Const*
dtype0*I
value@B>"0T5Í>	¿ÛÆJ¿—¾ã™?MÂ¼¾CóD¿ÆQ$?¾¼/¿–Äž?­ _¿’½á¾
E
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Mul
V
gradients/Mul_grad/MulMulgradients/grad_ys_0y*
T0*
_class

loc:@Mul
X
gradients/Mul_grad/Mul_1Mulgradients/grad_ys_0x*
T0*
_class

loc:@Mul
0
dx0Identitygradients/Mul_grad/Mul*
T0
2
dx1Identitygradients/Mul_grad/Mul_1*
T0"ª