
2
xPlaceholder*
dtype0*
shape
:
$

Reciprocal
Reciprocalx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<p1ª>ÙP´¾uÏ<ãßù=lÔ¿Uƒ¿®i\?| ´½îÚ?Ç‘ À»©ã½íÏ?yÓ±?±œi>¼¯R?
L
gradients/grad_ys_0Identitydy0*
T0*
_class
loc:@Reciprocal
ƒ
(gradients/Reciprocal_grad/ReciprocalGradReciprocalGrad
Reciprocalgradients/grad_ys_0*
T0*
_class
loc:@Reciprocal
B
dx0Identity(gradients/Reciprocal_grad/ReciprocalGrad*
T0"ª