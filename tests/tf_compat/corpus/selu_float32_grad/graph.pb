
2
xPlaceholder*
dtype0*
shape
:

SeluSelux*
T0
p
dy0Const*
dtype0*U
valueLBJ"<õè#?ï¦>)”©¾ˆçà¿"l´?š4Q?ãí(ÀAfŞ¿}r!¿aŒ¿U_½[ü¿Ä¹J½ÙÕÁ½¾Ğ‰?
F
gradients/grad_ys_0Identitydy0*
T0*
_class
	loc:@Selu
e
gradients/Selu_grad/SeluGradSeluGradgradients/grad_ys_0Selu*
T0*
_class
	loc:@Selu
6
dx0Identitygradients/Selu_grad/SeluGrad*
T0"ª