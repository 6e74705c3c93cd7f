
2
xPlaceholder*
dtype0*
shape
:
 
SoftsignSoftsignx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<W4¿ô„r??c¿SÃ¹½#?ñ¼œS¿Š­¿tH?¥
ƒ?cˆ¾§¢?Þ¡^¿Ðj?lqÿ¿PÈÌ=
J
gradients/grad_ys_0Identitydy0*
T0*
_class
loc:@Softsign
r
$gradients/Softsign_grad/SoftsignGradSoftsignGradgradients/grad_ys_0x*
T0*
_class
loc:@Softsign
>
dx0Identity$gradients/Softsign_grad/SoftsignGrad*
T0"ª