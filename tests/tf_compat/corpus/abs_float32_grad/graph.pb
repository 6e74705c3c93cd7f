
2
xPlaceholder*
dtype0*
shape
:

AbsAbsx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<vÙ?²â˜¾¯¢%¿§Ã†>—¿(àÊ¿2•á¿¸V`>Ç_­?ÿËµ>,ÿ’¿¬q¾l'Ü¾Â½>nåú>
E
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Abs
C
gradients/Abs_grad/SignSignx*
T0*
_class

loc:@Abs
l
gradients/Abs_grad/mulMulgradients/grad_ys_0gradients/Abs_grad/Sign*
T0*
_class

loc:@Abs
0
dx0Identitygradients/Abs_grad/mul*
T0"ª