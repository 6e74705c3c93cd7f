
2
xPlaceholder*
dtype0*
shape
:

CosCosx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<ÀÉ†¾o/„?\HÀ{›½~„:=‰‘\¾eä¿P“5¿à°‹¿#½?2sœ>Ãm¿‘4?9
¹>îŠð>
m
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Cos*&
 _has_manual_control_dependencies(
S
gradients/Cos_grad/NegNeggradients/grad_ys_0*
T0*
_class

loc:@Cos
W
gradients/Cos_grad/SinSinx^gradients/grad_ys_0*
T0*
_class

loc:@Cos
n
gradients/Cos_grad/mulMulgradients/Cos_grad/Neggradients/Cos_grad/Sin*
T0*
_class

loc:@Cos
0
dx0Identitygradients/Cos_grad/mul*
T0"ª