//! dev-env
